"""What marks and colours mean in every figure: the three trial categories' colours and symbols,
the front's, the chosen configuration's and the SLO lines' colours, one colour per trial, the
axis titles, each trial's hover text, where trials with no measured value are drawn, and the gap
an empty trace holds to keep its legend entry."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

from app.outputs.format import fmt_value
from app.outputs.trial_views import FAILED, FEASIBLE, INFEASIBLE, TrialView

STYLE = {
    FEASIBLE: dict(name="feasible (meets every SLO)", color="#2ca02c", symbol="circle"),
    INFEASIBLE: dict(name="infeasible (violates an SLO)", color="#ff7f0e", symbol="triangle-up"),
    FAILED: dict(name="failed (never served; drawn at the worst edge)", color="#d62728", symbol="x"),
}
FRONT_COLOR = "#1f3b73"
CHOSEN_COLOR = "#e6b800"
SLO_COLOR = "#d62728"
T = TypeVar("T")

TRIAL_COLORS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#637939",
    "#8c6d31",
)  # one per trial, in order


def axis_title(metric: str, direction: str) -> str:
    return f"{metric} ({'higher' if direction == 'maximize' else 'lower'} is better)"


def hover(v: TrialView, names: Sequence[str]) -> str:
    lines = [f"<b>{v.label}</b> [{v.category}]"]
    if v.values:
        lines += [f"{n}: {text}" for n, text in zip(names, v.objective_texts(names))]
    if v.violated:
        lines.append("violates: " + ", ".join(v.violated))
    if v.failure:
        lines.append("failed: " + v.failure[:120])
    lines.append(f"bottleneck: {v.diagnosis.bottleneck}")
    if v.params:
        lines.append(", ".join(f"{k}={fmt_value(x)}" for k, x in v.params.items()))
    return "<br>".join(lines)


def plotted(v: TrialView, names: Sequence[str], k: int, edge: float) -> float:
    """Where trial `v` is drawn on objective `names[k]`: its measured value, or `edge` where it
    has none (a failed trial; a percentile failed requests reach), never the penalty told."""
    values = v.measured_values(names)
    x = values[k] if values else math.nan
    return x if math.isfinite(x) else edge


def worst_edge(values: list[float], direction: str) -> float:
    """Where unmeasured trials are drawn: just past the worst measured value (NaN: none)."""
    values = [x for x in values if math.isfinite(x)]
    if not values:
        return 0.0
    lo, hi = min(values), max(values)
    pad = 0.08 * (hi - lo) if hi > lo else 0.1 * abs(hi) or 1.0
    if direction == "minimize":
        return hi + pad
    return max(lo - pad, 0.0) if lo >= 0 else lo - pad


def or_gap(values: Sequence[T]) -> list[T | None]:
    """A trace's coordinates, or one gap where it has none: an empty trace keeps its legend entry."""
    return [*values] or [None]
