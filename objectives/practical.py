"""A difference that matters: a confirmed difference is a win or a loss only when its interval
excludes 0 and its size passes a practical threshold.

Pure. An interval that excludes 0 says the difference is real, not that it is worth deploying:
three interleaved runs of a deterministic objective can put +0.2% [+0.2, +1.4] beyond the noise.
Each metric family has a default threshold, relative to the reference (`DEFAULTS`), that a
scenario may set (`verdict: {practical: {...}}`, per family or per metric name). The call:

* win / loss: the interval excludes 0 and the difference's size exceeds the threshold;
* equal: the whole interval lies within the threshold on both sides ("equal within 5%");
* tie: neither (the runs cannot tell a difference that matters from none).

An absolute difference (the reference is 0 in some run, e.g. a capacity of 0) has no relative
scale: it is held to the family's absolute threshold, in the metric's unit (`ABSOLUTE`: an error
rate's half a percentage point; 0 for the others, where any difference beyond the noise counts).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from loadgen import MetricName

PracticalCall = Literal["win", "loss", "equal", "tie"]
Family = Literal["latency", "throughput", "capacity", "error_rate", "other"]

DEFAULTS: dict[str, float] = {"latency": 0.05, "throughput": 0.05, "capacity": 0.05, "error_rate": 0.05, "other": 0.05}
ABSOLUTE: dict[str, float] = {"error_rate": 0.005}
THROUGHPUT_BASES = ("request_throughput", "output_throughput", "total_token_throughput", "goodput")


def family(metric: str) -> Family:
    """The threshold family a metric belongs to."""
    name = MetricName.parse(metric)
    if name.is_latency:
        return "latency"
    if name.base.startswith("slo_capacity"):
        return "capacity"
    if name.base == "error_rate":
        return "error_rate"
    if name.base in THROUGHPUT_BASES:
        return "throughput"
    return "other"


class PracticalSpec(BaseModel):
    """A scenario's `verdict.practical`: the smallest relative difference worth a win, per family
    (latency, throughput, capacity, error_rate, other) or per metric name (which wins)."""

    model_config = ConfigDict(extra="forbid")

    latency: float = Field(
        DEFAULTS["latency"], ge=0, lt=1, description="latency metrics (ms): a fraction of the reference"
    )
    throughput: float = Field(DEFAULTS["throughput"], ge=0, lt=1, description="throughputs and goodput")
    capacity: float = Field(DEFAULTS["capacity"], ge=0, lt=1, description="slo_capacity_* metrics")
    error_rate: float = Field(DEFAULTS["error_rate"], ge=0, lt=1, description="the error rate, relative")
    other: float = Field(DEFAULTS["other"], ge=0, lt=1, description="any other metric")
    metrics: dict[str, float] = Field(default_factory=dict, description="per metric name, over its family's")

    def threshold(self, metric: str) -> float:
        """The relative threshold of `metric`."""
        if metric in self.metrics:
            return self.metrics[metric]
        return float(getattr(self, family(metric)))


def absolute_threshold(metric: str) -> float:
    """The threshold of an absolute difference of `metric`, in its unit."""
    return ABSOLUTE.get(family(metric), 0.0)


def practical_call(
    value: float,
    low: float,
    high: float,
    runs: int,
    direction: Literal["minimize", "maximize"],
    threshold: float,
) -> PracticalCall:
    """A difference (`value` [`low`, `high`], candidate against reference, from `runs` runs a
    side) as a call against `threshold` (see the module docstring). A side with a single run
    says nothing of its noise: a tie, whatever the difference."""
    if runs < 2 or not (math.isfinite(low) and math.isfinite(high) and math.isfinite(value)):
        return "tie"
    if -threshold <= low and high <= threshold:
        return "equal"
    excludes_zero = low > 0 or high < 0
    if not excludes_zero or abs(value) <= threshold:
        return "tie"
    better = high < 0 if direction == "minimize" else low > 0
    return "win" if better else "loss"


def equal_text(threshold: float, relative: bool = True) -> str:
    """`equal within 5%` (relative) or `equal within 0.005` (absolute)."""
    return f"equal within {threshold:.0%}" if relative else f"equal within {threshold:g}"
