"""The Pareto front: objective against objective (or against the trial number, with one
objective) with every trial, the feasible front, the baselines and the chosen configuration; and
the front's hypervolume after each trial."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.outputs.figures.style import CHOSEN_COLOR, FRONT_COLOR, STYLE, axis_title, hover, or_gap, plotted, worst_edge
from app.outputs.format import fmt_value
from app.outputs.trial_views import FAILED, FEASIBLE, INFEASIBLE, TrialView
from storage.tables import ParetoSnapshot

# Where a trial is drawn: (x, y), a value it has none of at the worst edge (`style.plotted`).
Place = Callable[[TrialView], tuple[float, float]]


def pareto_figure(
    views: list[TrialView], names: Sequence[str], directions: Sequence[str], pair: tuple[int, int] = (0, 1)
) -> go.Figure:
    """Objective i against objective j: every trial by category, the feasible front, baselines, chosen."""
    fig = go.Figure()
    if len(names) == 1:  # one objective: against the trial number
        return _single_objective(views, names[0], directions[0])
    i, j = pair
    measured = [m for v in views if (m := v.measured_values(names))]
    edge_x = worst_edge([m[i] for m in measured], directions[i])
    edge_y = worst_edge([m[j] for m in measured], directions[j])

    def xy(v: TrialView) -> tuple[float, float]:
        return plotted(v, names, i, edge_x), plotted(v, names, j, edge_y)

    for trace in _category_traces(views, names, xy):
        fig.add_trace(trace)
    for trace in (_front_trace(views, names, xy), _baselines_trace(views, names, xy), _chosen_trace(views, names, xy)):
        if trace is not None:
            fig.add_trace(trace)
    fig.update_layout(
        title=f"Pareto front: {names[i]} vs {names[j]}",
        xaxis_title=axis_title(names[i], directions[i]),
        yaxis_title=axis_title(names[j], directions[j]),
        legend=dict(orientation="h", y=-0.2),
        height=560,
        margin=dict(t=60),
    )
    return fig


def _category_traces(views: list[TrialView], names: Sequence[str], xy: Place) -> list[go.Scatter]:
    """Every trial, one trace per category (feasible, infeasible, failed)."""
    traces = []
    for cat in (FEASIBLE, INFEASIBLE, FAILED):
        group = [v for v in views if v.category == cat]
        st = STYLE[cat]
        traces.append(
            go.Scatter(  # an empty category keeps its legend entry (count 0)
                x=or_gap([xy(v)[0] for v in group]),
                y=or_gap([xy(v)[1] for v in group]),
                mode="markers",
                name=f"{st['name']}: {len(group)}",
                legendgroup=cat,
                marker=dict(color=st["color"], symbol=st["symbol"], size=11, line=dict(width=1, color="#333")),
                text=[hover(v, names) for v in group],
                hoverinfo="text",
                customdata=[[v.number, cat] for v in group],
            )
        )
    return traces


def _front_trace(views: list[TrialView], names: Sequence[str], xy: Place) -> go.Scatter | None:
    """The feasible Pareto front as a step line, None while it is empty."""
    front = sorted((v for v in views if v.on_front), key=lambda v: xy(v)[0])
    if not front:
        return None
    return go.Scatter(
        x=[xy(v)[0] for v in front],
        y=[xy(v)[1] for v in front],
        mode="lines+markers",
        name=f"feasible Pareto front: {len(front)}",
        line=dict(color=FRONT_COLOR, width=2, shape="hv"),
        marker=dict(size=16, color="rgba(0,0,0,0)", line=dict(width=2, color=FRONT_COLOR)),
        text=[hover(v, names) for v in front],
        hoverinfo="text",
    )


def _baselines_trace(views: list[TrialView], names: Sequence[str], xy: Place) -> go.Scatter | None:
    """The baselines, labelled by name (alternately above and below, so neighbours stay legible)."""
    baselines = [v for v in views if v.baseline]
    if not baselines:
        return None
    return go.Scatter(
        x=[xy(v)[0] for v in baselines],
        y=[xy(v)[1] for v in baselines],
        mode="markers+text",
        name="baselines",
        text=[v.baseline for v in baselines],
        textposition=["top center" if k % 2 == 0 else "bottom center" for k in range(len(baselines))],
        marker=dict(symbol="diamond-open", size=20, color="#7f3fbf", line=dict(width=2)),
        hovertext=[hover(v, names) for v in baselines],
        hoverinfo="text",
    )


def _chosen_trace(views: list[TrialView], names: Sequence[str], xy: Place) -> go.Scatter | None:
    """The chosen configuration as a star, None where none is chosen."""
    chosen = next((v for v in views if v.chosen), None)
    if chosen is None:
        return None
    return go.Scatter(
        x=[xy(chosen)[0]],
        y=[xy(chosen)[1]],
        mode="markers",
        name="chosen",
        marker=dict(symbol="star", size=22, color=CHOSEN_COLOR, line=dict(width=1.5, color="#000")),
        text=[hover(chosen, names)],
        hoverinfo="text",
    )


def _single_objective(views: list[TrialView], name: str, direction: str) -> go.Figure:
    fig = go.Figure()
    measured = [m[0] for v in views if (m := v.measured_values([name]))]
    edge = worst_edge(measured, direction)
    for cat in (FEASIBLE, INFEASIBLE, FAILED):
        group = [v for v in views if v.category == cat]
        st = STYLE[cat]
        fig.add_trace(
            go.Scatter(
                x=or_gap([v.number for v in group]),
                y=or_gap([plotted(v, [name], 0, edge) for v in group]),
                mode="markers",
                name=f"{st['name']}: {len(group)}",
                marker=dict(color=st["color"], symbol=st["symbol"], size=11),
                text=[hover(v, [name]) for v in group],
                hoverinfo="text",
            )
        )
    fig.update_layout(
        title=f"{name} by trial", xaxis_title="trial", yaxis_title=axis_title(name, direction), height=480
    )
    return fig


def hypervolume_figure(
    snapshots: list[ParetoSnapshot], reference: Sequence[float] | None, names: Sequence[str]
) -> go.Figure:
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    xs = [s.after_trial_number for s in snapshots]
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=[s.hypervolume for s in snapshots],
            mode="lines+markers",
            name="hypervolume of the feasible front",
            line=dict(color=FRONT_COLOR),
        ),
        secondary_y=False,
    )
    fig.add_trace(
        go.Bar(
            x=xs,
            y=[s.n_feasible for s in snapshots],
            name="feasible trials so far",
            marker_color="rgba(44,160,44,0.35)",
        ),
        secondary_y=True,
    )
    ref = (
        " (reference point: " + ", ".join(f"{n} {fmt_value(r, digits=4)}" for n, r in zip(names, reference)) + ")"
        if reference
        else ""
    )
    fig.update_layout(
        title="Hypervolume history" + ref, xaxis_title="after trial", height=420, legend=dict(orientation="h", y=-0.25)
    )
    fig.update_yaxes(title_text="hypervolume", rangemode="tozero", secondary_y=False)
    fig.update_yaxes(title_text="feasible trials", rangemode="tozero", dtick=1, secondary_y=True)
    return fig
