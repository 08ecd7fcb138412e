"""The confirmation phase: every run of every candidate, coloured by round, with each candidate's
median and its 95% interval."""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.outputs.figures.style import TRIAL_COLORS, axis_title, or_gap
from app.outputs.format import fmt_value
from search.study.verdict import Verdict


def confirmation_figure(
    verdict: Verdict, names: Sequence[str], directions: Sequence[str], deployed: int | None = None
) -> go.Figure | None:
    """One panel per objective: each candidate's runs as dots coloured by round, its median with
    the 95% interval as a bar; the deployed configuration's label is starred."""
    cands = verdict.candidates
    if not cands:
        return None
    labels = [c.label + (" *" if c.trial_number == deployed else "") for c in cands]
    rounds = max(len(c.runs[names[0]]) for c in cands)
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=[axis_title(n, d) for n, d in zip(names, directions)])
    for col, name in enumerate(names, start=1):
        for r in range(rounds):
            points = [
                (label, c.runs[name][r])
                for label, c in zip(labels, cands)
                if r < len(c.runs[name]) and math.isfinite(c.runs[name][r])
            ]
            fig.add_trace(
                go.Scatter(
                    x=or_gap([p[0] for p in points]),
                    y=or_gap([p[1] for p in points]),
                    mode="markers",
                    name=f"round {r + 1}",
                    legendgroup=f"round-{r + 1}",
                    showlegend=col == 1,
                    marker=dict(color=TRIAL_COLORS[r % len(TRIAL_COLORS)], size=9, opacity=0.8),
                    hovertemplate=f"%{{x}}, round {r + 1}: %{{y:.4g}}<extra></extra>",
                ),
                row=1,
                col=col,
            )
        medians = [c.metrics[name] for c in cands]
        fig.add_trace(
            go.Scatter(
                x=labels,
                y=[m.value for m in medians],
                mode="markers",
                name="median [95% interval]",
                legendgroup="median",
                showlegend=col == 1,
                marker=dict(symbol="line-ew-open", size=26, color="#000", line=dict(width=3)),
                error_y=dict(
                    type="data",
                    symmetric=False,
                    color="#555",
                    thickness=1.5,
                    width=10,
                    array=[m.high - m.value for m in medians],
                    arrayminus=[m.value - m.low for m in medians],
                ),
                text=[
                    f"{label}: median {fmt_value(m.value, digits=4)} [{fmt_value(m.low, digits=4)}, "
                    f"{fmt_value(m.high, digits=4)}] over {m.n} runs"
                    for label, m in zip(labels, medians)
                ],
                hoverinfo="text",
            ),
            row=1,
            col=col,
        )
    fig.update_layout(
        title="Confirmation runs: each candidate's re-measurements by round, median and 95% interval"
        + (" (* deployed)" if deployed is not None else ""),
        height=460,
        width=max(700, 380 * len(names)),
        legend=dict(orientation="h", y=-0.25),
    )
    return fig
