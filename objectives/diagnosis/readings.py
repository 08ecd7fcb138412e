"""Readings of a trial's stored metrics and sizes of its workload, as the checks use them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from loadgen import MetricName, WorkloadSpec


def num(metrics: dict[str, Any], key: str) -> float:
    v = metrics.get(key)  # stored JSON has None where the run had NaN
    try:
        return math.nan if v is None else float(v)
    except (TypeError, ValueError):
        return math.nan


def known(x: float) -> bool:
    return x is not None and not math.isnan(x)


def fmt_ms(x: float) -> str:
    return f"{x / 1000:.1f} s" if x >= 10_000 else f"{x:.0f} ms" if x >= 10 else f"{x:.1f} ms"


def violated_metrics(constraints: dict[str, float] | None) -> list[str]:
    """Metric names of violated SLOs, from the study's constraint keys (`metric<=bound`)."""
    out = []
    for key, value in (constraints or {}).items():
        if value is not None and value > 0:
            out.append(key.split("<=")[0].split(">=")[0])
    return out


def metric_family(metric: str) -> str:
    return MetricName.parse(metric).family


def _mean_length(dist, seed: int = 0, n: int = 4000) -> float:
    return float(dist.sample(np.random.default_rng(seed), n).mean())


def mean_request_tokens(workload: WorkloadSpec) -> float | None:
    total_w, acc = 0.0, 0.0
    for c in workload.classes:
        if c.prompt_tokens is None or c.output_tokens is None:
            return None
        acc += c.weight * (_mean_length(c.prompt_tokens) + _mean_length(c.output_tokens))
        total_w += c.weight
    return acc / total_w if total_w else None


def longest_prompt_tokens(workload: WorkloadSpec) -> int:
    return max(c.longest_prompt_tokens(workload.endpoint) for c in workload.classes)


def has_shared_prefix(workload: WorkloadSpec | None) -> bool:
    return workload is not None and any(c.shared_prefix is not None for c in workload.classes)
