"""Every trial at a glance: each objective against each searched parameter, what limited each
trial (its diagnosed bottleneck), and the table of all trials."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.outputs.figures.style import STYLE, axis_title, hover, plotted, worst_edge
from app.outputs.trial_views import FAILED, FEASIBLE, INFEASIBLE, TrialView
from objectives.diagnosis import BOTTLENECKS


def objective_param_figure(
    views: list[TrialView], names: Sequence[str], directions: Sequence[str], params: Sequence[str]
) -> go.Figure | None:
    """Each objective (rows) against each searched parameter (columns); failed trials at the worst edge."""
    measured = [v for v in views if v.values]
    params = [p for p in params if any(p in v.config for v in measured)]
    if not measured or not params:
        return None
    fig = make_subplots(
        rows=len(names),
        cols=len(params),
        shared_yaxes=True,
        horizontal_spacing=0.03,
        vertical_spacing=0.12,
        column_titles=list(params),
        row_titles=list(names),
    )
    failed = [v for v in views if v.category == FAILED]
    for r, name in enumerate(names, start=1):
        edge = worst_edge([m[r - 1] for v in measured if (m := v.measured_values(names))], directions[r - 1])
        for c, p in enumerate(params, start=1):
            for cat in (FEASIBLE, INFEASIBLE, FAILED):
                group = [v for v in (failed if cat == FAILED else measured) if v.category == cat and p in v.config]
                fig.add_trace(
                    go.Scatter(
                        x=[_plain(v.config[p]) for v in group],
                        y=[plotted(v, names, r - 1, edge) for v in group],
                        mode="markers",
                        marker=dict(color=STYLE[cat]["color"], symbol=STYLE[cat]["symbol"], size=9),
                        name=STYLE[cat]["name"],
                        legendgroup=cat,
                        showlegend=(r == 1 and c == 1),
                        text=[hover(v, names) for v in group],
                        hoverinfo="text",
                    ),
                    row=r,
                    col=c,
                )
            if r == len(names):
                fig.update_xaxes(title_text=p, row=r, col=c)
        fig.update_yaxes(title_text=axis_title(name, directions[r - 1]), row=r, col=1)
    fig.update_layout(
        title="Each objective against each parameter (as applied; baselines included)",
        height=300 * len(names) + 120,
        width=max(700, 260 * len(params)),
        legend=dict(orientation="h", y=-0.12),
    )
    return fig


def _plain(x: Any) -> Any:
    return str(x) if isinstance(x, bool) else x


def bottleneck_figure(views: list[TrialView]) -> go.Figure:
    order = [b for b in BOTTLENECKS if any(v.diagnosis.bottleneck == b for v in views)]
    fig = go.Figure()
    for cat in (FEASIBLE, INFEASIBLE, FAILED):
        fig.add_trace(
            go.Bar(
                x=order,
                y=[sum(v.category == cat and v.diagnosis.bottleneck == b for v in views) for b in order],
                name=STYLE[cat]["name"].split(" (")[0],
                marker_color=STYLE[cat]["color"],
                customdata=[
                    ", ".join(str(v.number) for v in views if v.category == cat and v.diagnosis.bottleneck == b)
                    for b in order
                ],
                hovertemplate="%{x}: %{y} trials (%{customdata})<extra></extra>",
            )
        )
    fig.update_layout(title="What limited each trial (diagnosis)", barmode="stack", yaxis_title="trials", height=380)
    return fig


def trials_table_figure(views: list[TrialView], names: Sequence[str]) -> go.Figure:
    """Every trial with its category, objectives, failure class and bottleneck (for the dashboard,
    where each trial's note holds the rest)."""
    fill = {FEASIBLE: "#e3f5e1", INFEASIBLE: "#fdebd3", FAILED: "#f9d9d9"}
    cols = ["trial", "kind", "feasibility", *names, "violated SLOs", "failure", "bottleneck"]
    rows = [
        [
            f"{v.number}{' *' if v.chosen else ' p' if v.on_front else ''}",
            v.kind,
            v.category,
            *(v.objective_texts(names) if v.values else ["-"] * len(names)),
            ", ".join(k.split("<=")[0].split(">=")[0] for k in v.violated) or "-",
            v.failure.split(" ", 1)[0] if v.failure else "-",
            v.diagnosis.bottleneck,
        ]
        for v in views
    ]
    columns: list[Sequence[str]] = list(zip(*rows)) if rows else [[] for _ in cols]
    fig = go.Figure(
        go.Table(
            header=dict(values=cols, fill_color="#1f3b73", font=dict(color="white", size=11)),
            cells=dict(
                values=columns,
                height=24,
                fill_color=[[fill[v.category] for v in views]] * len(cols),
                align="left",
                font=dict(size=11),
            ),
        )
    )
    fig.update_layout(title="All trials (* chosen, p on the feasible Pareto front)", height=160 + 26 * len(views))
    return fig
