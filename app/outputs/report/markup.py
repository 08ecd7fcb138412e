"""The report's HTML pieces that every section uses: escaped text, number cells that sort by
value, a figure's div, a feasibility mark."""

from __future__ import annotations

import html
from typing import Any

import plotly.graph_objects as go

from app.outputs.format import fmt_value


def esc(x: Any) -> str:
    return html.escape(str(x))


def num_cell(v: Any) -> tuple[str, str]:
    """(shown text, sort key) of a metric value; the key sorts numbers by value, not by text."""
    shown = esc(fmt_value(v, digits=4, missing=""))
    if isinstance(v, bool):
        return shown, str(int(v))
    if isinstance(v, (int, float)) and shown:
        return shown, repr(float(v))
    return shown, shown


def fig_html(fig: go.Figure | None, div_id: str) -> str:
    """The figure's div is "fig-<div_id>" (section headings carry the bare ids)."""
    if fig is None:
        return ""
    height = fig.layout.height or 450  # else the div takes the viewport's height: blank space
    return fig.to_html(
        full_html=False,
        include_plotlyjs=False,
        div_id="fig-" + div_id,
        default_height=f"{height}px",
        config={"displaylogo": False},
    )


def mark(category: str) -> str:
    return f'<span class="mark mark-{category}" data-category="{category}">{category}</span>'
