"""The report's picture of a replayed trace: its rate over time, its prompt and output lengths.

A study whose workload replays a trace shows what traffic it was tuned for: the whole trace's
request rate over its own clock (the part replayed, `start_s`-`end_s`, shaded when the
scenario picks one), and the distributions of the lengths sent (after clipping). Nothing to draw
for a workload without a trace, or one whose file is no longer where the scenario says.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from loadgen import TraceError, WorkloadSpec, rate_over_time, read_trace

_BINS = 96


def trace_figure(workload: WorkloadSpec) -> go.Figure | None:
    spec = workload.trace
    if spec is None:
        return None
    try:
        whole = read_trace(spec.file, spec.format, spec.block_tokens)
    except TraceError:
        return None
    replayed = spec.trace
    binned = rate_over_time(whole.arrival_s, bins=_BINS)
    hours = whole.span_s >= 3 * 3600
    unit, scale = ("h", 3600.0) if hours else ("s", 1.0)
    fig = make_subplots(
        rows=1,
        cols=3,
        column_widths=[0.5, 0.25, 0.25],
        subplot_titles=(
            f"requests/s over the trace ({len(whole):,} requests)",
            "prompt tokens",
            "output tokens",
        ),
    )
    fig.add_trace(
        go.Bar(
            x=[start / scale for start, _ in binned],
            y=[rate for _, rate in binned],
            marker_color="#1f77b4",
            name="rate",
            hovertemplate=f"%{{x:.2f}} {unit}: %{{y:.3g}} req/s<extra></extra>",
        ),
        row=1,
        col=1,
    )
    if spec.start_s is not None or spec.end_s is not None:
        lo = (spec.start_s or 0.0) / scale
        hi = (spec.end_s if spec.end_s is not None else whole.span_s) / scale
        fig.add_vrect(x0=lo, x1=hi, fillcolor="#e6b800", opacity=0.2, line_width=0, row=1, col=1)
    for col, (values, color) in enumerate(
        ((replayed.prompt_tokens, "#2ca02c"), (replayed.output_tokens, "#9467bd")), start=2
    ):
        fig.add_trace(
            go.Histogram(x=np.asarray(values).tolist(), marker_color=color, nbinsx=40, name="", showlegend=False),
            row=1,
            col=col,
        )
    fig.update_xaxes(title_text=f"trace time ({unit})", row=1, col=1)
    fig.update_xaxes(title_text="tokens", row=1, col=2)
    fig.update_xaxes(title_text="tokens", row=1, col=3)
    fig.update_layout(height=320, showlegend=False, margin=dict(t=50, b=40, l=50, r=20), bargap=0.05)
    return fig
