"""From a run's flat metrics to what Optuna sees: the objective vector and SLO constraint values.

Constraint values follow Optuna's convention (<= 0 feasible) and are normalized by the bound,
so SLOs in ms and in tokens/s weigh alike: `(value - max) / max`, `(min - value) / min`. A NaN
metric (nothing measured) violates its SLO by 1.0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, Self

from pydantic import BaseModel, ConfigDict, model_validator

from loadgen import BASE_KEYS, PER_CLASS_KEYS, SERVER_KEYS, Bound, MetricName, class_key
from objectives.capacity import CAPACITY_KEYS, TARGET_ABORTED

NAN_VIOLATION = 1.0
# Every trial's first constraint: the server started and served the load.
SERVER_OK = "server_ok"
# With load stages, every trial's second: the target stage ran to its end (an early abort means
# it had certainly missed an SLO, and its partial latencies must not look feasible).
TARGET_COMPLETED = "target_completed"
# Worst case for a minimized metric that is not a latency: finite, so samplers can use it.
LARGE_PENALTY = 1e9

Direction = Literal["minimize", "maximize"]  # as Optuna spells a study's directions


class ObjectiveSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metric: str
    direction: Direction


class SLOSpec(BaseModel, Generic[Bound]):
    """One bound on one metric: exactly one of max, min (numbers unless parametrized)."""

    model_config = ConfigDict(extra="forbid")

    metric: str
    max: Bound | None = None
    min: Bound | None = None

    @model_validator(mode="after")
    def _one_bound(self) -> Self:
        if (self.max is None) == (self.min is None):
            raise ValueError(f"SLO on {self.metric}: give exactly one of max, min")
        if self.bound == 0:
            raise ValueError(f"SLO on {self.metric}: the bound must be non-zero (constraints are normalized by it)")
        return self

    @property
    def bound(self) -> Bound:
        bound = self.max if self.max is not None else self.min
        assert bound is not None  # `_one_bound`: exactly one is given
        return bound

    def violation(self: SLOSpec[float], value: float) -> float:
        """> 0: violated, by that fraction of the bound; <= 0: met (numeric bounds only)."""
        if value is None or math.isnan(value):
            return NAN_VIOLATION
        if self.max is not None:
            return (value - self.max) / abs(self.max)
        return (self.bound - value) / abs(self.bound)


@dataclass
class Score:
    values: list[float]
    constraints: dict[str, float] = field(default_factory=dict)
    feasible: bool = True


def slo_key(slo: SLOSpec) -> str:
    """The constraint's name: `metric<=bound` or `metric>=bound`."""
    return f"{slo.metric}<={slo.max:g}" if slo.max is not None else f"{slo.metric}>={slo.min:g}"


def penalty_values(objectives: list[ObjectiveSpec], request_timeout_s: float) -> list[float]:
    """Worst-case objective values, for NaN objectives and for trials whose server never served."""
    out = []
    for o in objectives:
        if o.direction == "maximize":
            out.append(0.0)
        elif MetricName.parse(o.metric).unit == "ms":
            out.append(request_timeout_s * 1000.0)
        else:
            out.append(LARGE_PENALTY)
    return out


def score(
    flat_metrics: dict[str, float],
    objectives: list[ObjectiveSpec],
    slos: Sequence[SLOSpec] = (),
    request_timeout_s: float = 300.0,
    *,
    served: bool = True,
    staged: bool = False,
) -> Score:
    """The objective vector (NaN or missing -> the penalty value) and the SLO constraints.

    A server that never served scores as if nothing was measured: penalties, every SLO violated,
    and the `server_ok` constraint violated too. `staged` (the trial ran load stages): the
    `target_completed` constraint is violated when the target stage was aborted."""
    metrics = flat_metrics if served else {}
    penalties = penalty_values(objectives, request_timeout_s)
    values = []
    for o, penalty in zip(objectives, penalties):
        v = metrics.get(o.metric, math.nan)
        values.append(penalty if v is None or math.isnan(v) else float(v))
    constraints = {slo_key(s): s.violation(metrics.get(s.metric, math.nan)) for s in slos}
    constraints[SERVER_OK] = -1.0 if served else 1.0
    if staged:
        constraints[TARGET_COMPLETED] = 1.0 if not served or metrics.get(TARGET_ABORTED, 0) else -1.0
    return Score(values, constraints, all(c <= 0 for c in constraints.values()))


def known_metric_names(class_names: Sequence[str] = ()) -> list[str]:
    return (
        list(BASE_KEYS)
        + [class_key(k, c) for c in class_names for k in PER_CLASS_KEYS]
        + list(SERVER_KEYS)
        + list(CAPACITY_KEYS)
    )


def validate_metric_names(names: list[str], class_names: Sequence[str] = ()) -> None:
    """Raise ValueError naming each unknown metric and listing the allowed ones."""
    known = set(known_metric_names(class_names))
    unknown = [n for n in names if n not in known]
    if not unknown:
        return
    per_class = (
        f"; per class: <metric>@<class> with class in {', '.join(class_names)}"
        if class_names
        else "; per-class metrics need the workload's class names"
    )
    raise ValueError(
        f"unknown metric name(s): {', '.join(unknown)}. Allowed: {', '.join(BASE_KEYS)}; "
        f"server-side: {', '.join(SERVER_KEYS)}; with a capacity section: "
        f"{', '.join(CAPACITY_KEYS)}{per_class} (per-class metrics: "
        f"{', '.join(PER_CLASS_KEYS)})"
    )
