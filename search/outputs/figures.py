"""The study's plotly figures, shared by the HTML report and the optuna-dashboard.

Colours and symbols mean the same everywhere: green circles met every SLO, orange triangles
violated one, red crosses never served (drawn at the worst edge of the axes, since they have
no measured value), open diamonds are baselines, the gold star is the chosen configuration.
The latency-against-rate figure colours by trial instead; its subtitle says what its marks mean.
The confirmation figure colours each re-measurement by its round.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import optuna
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from objectives.diagnosis import BOTTLENECKS
from objectives.scoring import SLOSpec
from search.outputs.export import fmt_capacity
from search.outputs.format import fmt_value
from search.outputs.trial_views import FAILED, FEASIBLE, INFEASIBLE, StageView, TrialView
from search.study.verdict import Verdict
from storage.tables import ParetoSnapshot

STYLE = {
    FEASIBLE: dict(name="feasible (meets every SLO)", color="#2ca02c", symbol="circle"),
    INFEASIBLE: dict(name="infeasible (violates an SLO)", color="#ff7f0e", symbol="triangle-up"),
    FAILED: dict(name="failed (never served; drawn at the worst edge)", color="#d62728", symbol="x"),
}
FRONT_COLOR = "#1f3b73"
CHOSEN_COLOR = "#e6b800"
SLO_COLOR = "#d62728"
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
        lines += [f"{n}: {fmt_value(x, digits=4)}" for n, x in zip(names, v.values)]
    if v.violated:
        lines.append("violates: " + ", ".join(v.violated))
    if v.failure:
        lines.append("failed: " + v.failure[:120])
    lines.append(f"bottleneck: {v.diagnosis.bottleneck}")
    if v.params:
        lines.append(", ".join(f"{k}={fmt_value(x)}" for k, x in v.params.items()))
    return "<br>".join(lines)


def _worst_edge(values: list[float], direction: str) -> float:
    """Where unmeasured trials are drawn: just past the worst measured value."""
    if not values:
        return 0.0
    lo, hi = min(values), max(values)
    pad = 0.08 * (hi - lo) if hi > lo else 0.1 * abs(hi) or 1.0
    if direction == "minimize":
        return hi + pad
    return max(lo - pad, 0.0) if lo >= 0 else lo - pad


def pareto_figure(
    views: list[TrialView], names: Sequence[str], directions: Sequence[str], pair: tuple[int, int] = (0, 1)
) -> go.Figure:
    """Objective i against objective j: every trial by category, the feasible front, baselines, chosen."""
    fig = go.Figure()
    if len(names) == 1:  # one objective: against the trial number
        return _single_objective(views, names[0], directions[0])
    i, j = pair
    measured = [v for v in views if v.values]
    edge_x = _worst_edge([v.values[i] for v in measured], directions[i])
    edge_y = _worst_edge([v.values[j] for v in measured], directions[j])

    def xy(v: TrialView) -> tuple[float, float]:
        return (v.values[i], v.values[j]) if v.values else (edge_x, edge_y)

    for cat in (FEASIBLE, INFEASIBLE, FAILED):
        group = [v for v in views if v.category == cat]
        st = STYLE[cat]
        fig.add_trace(
            go.Scatter(  # an empty category keeps its legend entry (count 0): [None]
                x=[xy(v)[0] for v in group] or [None],
                y=[xy(v)[1] for v in group] or [None],
                mode="markers",
                name=f"{st['name']}: {len(group)}",
                legendgroup=cat,
                marker=dict(color=st["color"], symbol=st["symbol"], size=11, line=dict(width=1, color="#333")),
                text=[hover(v, names) for v in group],
                hoverinfo="text",
                customdata=[[v.number, cat] for v in group],
            )
        )
    front = sorted((v for v in views if v.on_front), key=lambda v: v.values[i])
    if front:
        fig.add_trace(
            go.Scatter(
                x=[v.values[i] for v in front],
                y=[v.values[j] for v in front],
                mode="lines+markers",
                name=f"feasible Pareto front: {len(front)}",
                line=dict(color=FRONT_COLOR, width=2, shape="hv"),
                marker=dict(size=16, color="rgba(0,0,0,0)", line=dict(width=2, color=FRONT_COLOR)),
                text=[hover(v, names) for v in front],
                hoverinfo="text",
            )
        )
    baselines = [v for v in views if v.baseline]
    if baselines:
        fig.add_trace(
            go.Scatter(
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
        )
    chosen = [v for v in views if v.chosen]
    if chosen:
        fig.add_trace(
            go.Scatter(
                x=[chosen[0].values[i]],
                y=[chosen[0].values[j]],
                mode="markers",
                name="chosen",
                marker=dict(symbol="star", size=22, color=CHOSEN_COLOR, line=dict(width=1.5, color="#000")),
                text=[hover(chosen[0], names)],
                hoverinfo="text",
            )
        )
    fig.update_layout(
        title=f"Pareto front: {names[i]} vs {names[j]}",
        xaxis_title=axis_title(names[i], directions[i]),
        yaxis_title=axis_title(names[j], directions[j]),
        legend=dict(orientation="h", y=-0.2),
        height=560,
        margin=dict(t=60),
    )
    return fig


def _single_objective(views, name, direction) -> go.Figure:
    fig = go.Figure()
    measured = [v for v in views if v.values]
    edge = _worst_edge([v.values[0] for v in measured], direction)
    for cat in (FEASIBLE, INFEASIBLE, FAILED):
        group = [v for v in views if v.category == cat]
        st = STYLE[cat]
        fig.add_trace(
            go.Scatter(
                x=[v.number for v in group] or [None],
                y=[v.values[0] if v.values else edge for v in group] or [None],
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


def measured_study(study: optuna.Study, views: list[TrialView]) -> optuna.Study:
    """An in-memory copy with measured trials only: failed trials carry penalty values that
    would dominate any importance or slice."""
    keep = {v.number for v in views if v.values}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    copy = optuna.create_study(directions=study.directions)
    copy.add_trials(
        [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)) if t.number in keep]
    )
    return copy


def importance_figure(
    study: optuna.Study, views: list[TrialView], names: Sequence[str], directions: Sequence[str]
) -> tuple[go.Figure | None, str]:
    """Parameter importances per objective (Optuna 5's default PED-ANOVA), or why there are none."""
    measured = measured_study(study, views)
    n = len(measured.trials)
    params = sorted({p for t in measured.trials for p in t.params})
    if n < 3 or not params:
        return None, f"Parameter importances need at least 3 measured trials with sampled parameters ({n} here)."
    fig = go.Figure()
    notes = []
    for k, name in enumerate(names):
        sign = 1.0 if directions[k] == "minimize" else -1.0  # PED-ANOVA explains *low* targets
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                imp = optuna.importance.get_param_importances(
                    measured, target=lambda t, k=k, sign=sign: sign * t.values[k]
                )
            except Exception as e:
                notes.append(f"{name}: {e}")
                continue
        if any("less than 2 trials" in str(w.message) for w in caught):
            notes.append(f"{name}: some parameter ranges hold fewer than 2 trials, so the importances are rough")
        fig.add_trace(go.Bar(x=[imp.get(p, 0.0) for p in params], y=params, orientation="h", name=name))
    if not fig.data:
        return None, "Parameter importances could not be computed: " + "; ".join(notes)
    fig.update_layout(
        title=f"Parameter importances per objective ({n} measured trials, PED-ANOVA)",
        xaxis_title="importance (share)",
        barmode="group",
        height=120 + 60 * len(params),
    )
    return fig, "; ".join(notes)


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
        edge = _worst_edge([v.values[r - 1] for v in measured], directions[r - 1])
        for c, p in enumerate(params, start=1):
            for cat in (FEASIBLE, INFEASIBLE, FAILED):
                group = [v for v in (failed if cat == FAILED else measured) if v.category == cat and p in v.config]
                fig.add_trace(
                    go.Scatter(
                        x=[_plain(v.config[p]) for v in group],
                        y=[v.values[r - 1] if v.values else edge for v in group],
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
            *([fmt_value(x, digits=4) for x in v.values] if v.values else ["-"] * len(names)),
            ", ".join(k.split("<=")[0].split(">=")[0] for k in v.violated) or "-",
            v.failure.split(" ", 1)[0] if v.failure else "-",
            v.diagnosis.bottleneck,
        ]
        for v in views
    ]
    fig = go.Figure(
        go.Table(
            header=dict(values=cols, fill_color="#1f3b73", font=dict(color="white", size=11)),
            cells=dict(
                values=list(zip(*rows)) if rows else [[] for _ in cols],
                height=24,
                fill_color=[[fill[v.category] for v in views]] * len(cols),
                align="left",
                font=dict(size=11),
            ),
        )
    )
    fig.update_layout(title="All trials (* chosen, p on the feasible Pareto front)", height=160 + 26 * len(views))
    return fig


# --- latency against rate: each trial's load stages -----------------------------------------


def _slo_text(slo: SLOSpec) -> str:
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
    rps, low, high = (cap.rps, cap.low, cap.high) if cap is not None else (None, None, None)
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


def _row_top(views: list[TrialView], slo: SLOSpec) -> float:
    values = [x for v in views for s in v.stages if (x := _stage_value(s, slo.metric)) is not None]
    return 1.15 * max([*values, float(slo.bound)])


def _trial_menu(views: list[TrialView], owners: list[int]) -> dict:
    buttons = [dict(label="all trials", method="restyle", args=[{"visible": [True] * len(owners)}])]
    buttons += [
        dict(label=v.label, method="restyle", args=[{"visible": [o == v.number for o in owners]}]) for v in views
    ]
    return dict(buttons=buttons, direction="down", x=1.0, xanchor="right", y=1.0, yanchor="bottom", showactive=True)


def latency_rate_figure(views: list[TrialView], slos: Sequence[SLOSpec]) -> go.Figure | None:
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


# --- the confirmation phase: every run of every candidate --------------------------------------


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
                    x=[p[0] for p in points] or [None],
                    y=[p[1] for p in points] or [None],
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
