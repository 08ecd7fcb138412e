"""Latency against rate: each trial's load stages as points, its capacity and the SLO lines, one
row per latency SLO, with a menu that shows one trial at a time."""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.outputs.export import fmt_capacity
from app.outputs.figures.style import SLO_COLOR, TRIAL_COLORS
from app.outputs.format import fmt_value
from app.outputs.trial_views import StageView, TrialView
from objectives.scoring import SLOSpec


def _slo_text(slo: SLOSpec[float]) -> str:
    return f"{slo.metric} {'<=' if slo.max is not None else '>='} {fmt_value(slo.bound)}"


def _stage_value(s: StageView, metric: str) -> float | None:
    value = s.metrics.get(metric)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _stage_hover(v: TrialView, s: StageView, metric: str) -> str:
    lines = [
        f"<b>{v.label}</b>",
        f"stage {s.index + 1} ({s.kind}) at {fmt_value(s.rate)} req/s",
        f"{metric}: {fmt_value(_stage_value(s, metric), digits=4)} ms",
        s.outcome,
        f"elapsed {fmt_value(s.elapsed_s)} s",
    ]
    if s.saved_s:
        lines[-1] += f", saved {fmt_value(s.saved_s)} s by the abort"
    return "<br>".join(lines)


def _stage_points(v: TrialView, metric: str, color: str, first_row: bool) -> go.Scatter:
    """The trial's stages by rate: filled markers ran to their end, open ones were aborted;
    the target stage is a square."""
    stages = sorted(v.stages, key=lambda s: s.rate)
    symbols = [("square" if s.kind == "target" else "circle") + ("-open" if s.aborted else "") for s in stages]
    return go.Scatter(
        x=[s.rate for s in stages],
        y=[_stage_value(s, metric) for s in stages],
        mode="lines+markers",
        name=f"{v.label}{' (chosen)' if v.chosen else ''}: capacity {fmt_capacity(v.capacity)} req/s",
        legendgroup=f"trial-{v.number}",
        showlegend=first_row,
        line=dict(color=color, width=1),
        connectgaps=True,
        marker=dict(symbol=symbols, size=11, color=color, line=dict(width=2, color=color)),
        text=[_stage_hover(v, s, metric) for s in stages],
        hoverinfo="text",
    )


def _capacity_traces(v: TrialView, color: str, top: float) -> list[go.Scatter]:
    """The capacity as a dotted vertical line over its bracket (met at low, violated at high)."""
    cap = v.capacity
    if cap is None:
        return []
    rps, low, high = cap.rps, cap.low, cap.high
    group, out = f"trial-{v.number}", []
    if low and high:
        r, g, b = (int(color[k : k + 2], 16) for k in (1, 3, 5))
        out.append(
            go.Scatter(
                x=[low, high, high, low, low],
                y=[0, 0, top, top, 0],
                fill="toself",
                mode="none",
                fillcolor=f"rgba({r},{g},{b},0.1)",
                legendgroup=group,
                showlegend=False,
                text=f"{v.label}: met at {fmt_value(low)}, violated at {fmt_value(high)} req/s",
                hoverinfo="text",
            )
        )
    if rps:
        out.append(
            go.Scatter(
                x=[rps, rps],
                y=[0, top],
                mode="lines",
                line=dict(color=color, dash="dot", width=2),
                legendgroup=group,
                showlegend=False,
                hoverinfo="text",
                text=f"{v.label}: capacity {cap.summary or fmt_capacity(cap)}",
            )
        )
    return out


def _row_top(views: list[TrialView], slo: SLOSpec[float]) -> float:
    values = [x for v in views for s in v.stages if (x := _stage_value(s, slo.metric)) is not None]
    return 1.15 * max([*values, float(slo.bound)])


def _trial_menu(views: list[TrialView], owners: list[int]) -> dict:
    buttons = [dict(label="all trials", method="restyle", args=[{"visible": [True] * len(owners)}])]
    buttons += [
        dict(label=v.label, method="restyle", args=[{"visible": [o == v.number for o in owners]}]) for v in views
    ]
    return dict(buttons=buttons, direction="down", x=1.0, xanchor="right", y=1.0, yanchor="bottom", showactive=True)


def latency_rate_figure(views: list[TrialView], slos: Sequence[SLOSpec[float]]) -> go.Figure | None:
    """Each trial's load stages: offered rate against each latency an SLO bounds (a row per SLO,
    the bound dashed), aborted stages open, the capacity found dotted over its shaded bracket.
    The menu shows one trial at a time; None without stages or latency SLOs."""
    staged = [v for v in views if v.stages]
    if not staged or not slos:
        return None
    fig = make_subplots(rows=len(slos), cols=1, shared_xaxes=True, vertical_spacing=0.1)
    tops = [_row_top(staged, slo) for slo in slos]
    owners: list[int] = []  # the trial of each trace, for the menu
    for k, v in enumerate(staged):
        color = TRIAL_COLORS[k % len(TRIAL_COLORS)]
        for r, (slo, top) in enumerate(zip(slos, tops), start=1):
            for trace in [*_capacity_traces(v, color, top), _stage_points(v, slo.metric, color, r == 1)]:
                fig.add_trace(trace, row=r, col=1)
                owners.append(v.number)
    for r, (slo, top) in enumerate(zip(slos, tops), start=1):
        fig.add_hline(
            y=slo.bound,
            line=dict(color=SLO_COLOR, dash="dash", width=1.5),
            row=r,
            col=1,
            annotation_text=f"SLO {_slo_text(slo)}",
            annotation_position="top left",
            annotation_font_color=SLO_COLOR,
        )
        fig.update_yaxes(title_text=f"{slo.metric} (ms)", range=[0, top], row=r, col=1)
    fig.update_xaxes(type="log")  # every row: shared axes must agree on their type
    fig.update_xaxes(title_text="offered rate (req/s, log scale)", row=len(slos), col=1)
    fig.update_layout(
        title=dict(
            text="Latency against rate: each trial's load stages",
            subtitle_text=(
                "open marker: aborted early · square: the target load · dotted: the capacity found, "
                "shaded: its bracket · dashed red: the SLO"
            ),
        ),
        updatemenus=[_trial_menu(staged, owners)],
        height=300 * len(slos) + 220,
        legend=dict(orientation="h", yanchor="top", y=-0.2),
        hovermode="closest",
    )
    return fig
