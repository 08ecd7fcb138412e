"""The end-of-study terminal summary: every trial of the search, what it measured (with the
differences from the baselines that the measured noise explains marked), the confirmation runs'
medians with their intervals, and the verdict in words. Read from the read model: the trial
views and the confirmation table's rows. `finish` prints it at a study's end and writes the
study's files."""

from __future__ import annotations

import math
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from sqlalchemy.orm import Session

from app.outputs import calibration_text
from app.outputs.confirmation_rows import confirmation_rows
from app.outputs.export import NoBestYaml, export
from app.outputs.format import fmt_value
from app.outputs.read_model import LoadedStudy, load_study
from app.outputs.report import REPORT_NAME, write_report
from app.outputs.trial_views import FAILED, StageView, TrialView, baseline_views, measured_text
from loadgen import mix_deviation
from objectives.statistics import Call, beyond_noise
from storage.database import open_db

WITHIN_NOISE = "~"
_CALL_COLOURS = {"win": "green", "loss": "red", "tie": "default", "equal": "default"}


def within_noise(ls: LoadedStudy, view: TrialView, metric: str, baselines: dict[str, TrialView]) -> bool:
    """Whether the trial's single value of `metric` is within the stored run-to-run noise of
    some baseline's (False without a measured noise: nothing to discount)."""
    cv = (ls.record.noise or {}).get(metric)
    value = view.metrics.get(metric)
    if view.baseline or cv is None or not isinstance(value, (int, float)):
        return False
    for base in baselines.values():
        ref = base.metrics.get(metric)
        if base.category == FAILED or not isinstance(ref, (int, float)) or not ref or not math.isfinite(ref):
            continue
        if not beyond_noise(value / ref - 1.0, cv):
            return True
    return False


def _direction(direction: str) -> str:
    return "max" if direction == "maximize" else "min"


def summary_table(ls: LoadedStudy, max_rows: int = 40) -> Table:
    sc = ls.scenario
    deployment = ls.deployment()
    views = ls.views
    baselines = baseline_views(views)
    table = Table(
        title=f"study {ls.record.study_name}: scenario {sc.name}, {ls.record.vllm_version}, "
        f"{ls.record.hardware.get('description')}: the search (one run per trial)"
    )
    table.add_column("trial", justify="right")
    table.add_column("kind", no_wrap=True)
    for name, direction in zip(sc.objective_names, sc.directions):
        table.add_column(f"{name} ({_direction(direction)})", justify="right")
    table.add_column("SLOs")
    table.add_column("parameters", overflow="fold")  # fold, not "…": a cut name says nothing
    for v in views[-max_rows:]:
        mark = " *" if v.chosen else (" p" if v.on_front else "")
        if v.category == FAILED:
            values = ["-"] * len(sc.objective_names)
            slo = f"[red]failed: {v.failure_class}[/]"
        else:
            values = [
                measured_text(v.metrics, n)  # `no value (3 failed requests)`, never the penalty told
                + (f" {WITHIN_NOISE}" if within_noise(ls, v, n, baselines) else "")
                for n in sc.objective_names
            ]
            slo = "[green]met[/]" if not v.violated else "[yellow]violated: " + ", ".join(v.violated) + "[/]"
            if v.client_behind:
                slo += " [red](client behind)[/]"
        params = " ".join(f"{k}={fmt_value(x)}" for k, x in v.params.items()) if not v.baseline else ""
        table.add_row(f"{v.number}{mark}", v.kind, *values, slo, params)
    chosen = "deployed (confirmed)" if deployment.confirmed else "chosen (on single measurements)"
    caption = (f"* {chosen}   " if deployment.trial_number is not None else "") + "p on the feasible Pareto front"
    if ls.record.noise:
        caption += (
            f"   {WITHIN_NOISE} within the run-to-run noise of a baseline's value (noise from the confirmation runs)"
        )
    table.caption = caption
    return table


def _calls(calls: dict[str, Call] | None) -> str:
    if calls is None:
        return "-"
    return ", ".join(f"[{_CALL_COLOURS[c]}]{m} {c}[/]" for m, c in calls.items())


def confirmation_table(ls: LoadedStudy) -> Table | None:
    """One row per confirmed candidate: runs, each objective's median [95% interval], the SLOs
    on the confirmed medians, and its call against each baseline (None: no confirmation)."""
    t = confirmation_rows(ls)
    if t is None:
        return None
    table = Table(
        title=f"confirmation: {t.runs} runs per candidate on fresh servers, interleaved "
        f"({t.runs_done} of {t.runs_planned} done); medians [95% interval]"
    )
    table.add_column("candidate", no_wrap=True)
    table.add_column("runs ok", justify="right")
    for name, direction in zip(t.objectives, t.directions):
        table.add_column(f"{name} ({_direction(direction)})", justify="right")
    table.add_column("SLOs (confirmed medians)")
    for name in t.baselines:
        table.add_column(f"vs {name}")
    for row in t.rows:
        slo = f"[green]{escape(row.slo)}[/]" if row.feasible else f"[yellow]{escape(row.slo)}[/]"
        calls = ["" if row.baseline else _calls(c) for c in row.calls]
        table.add_row(
            f"{row.label}{' *' if row.deployed else ''}", row.runs_ok, *(text for text, _ in row.medians), slo, *calls
        )
    table.caption = (
        "* deployed   " if t.deployed is not None else ""
    ) + "win/loss: beyond the noise (95% interval of the difference excludes 0)"
    return table


def verdict_lines(ls: LoadedStudy) -> list[str]:
    """The verdict in full (every comparison, the noise, warnings), or what single measurements
    are worth; then the calibration reference with its spread, and what the search's stages sent."""
    text, note = ls.verdict_text(), ls.unconfirmed_note()
    return (
        (text.lines() if text is not None else [])
        + ([note] if note else [])
        + ls.cost_note()
        + calibration_text.calibration_lines(ls.scenario, ls.calibration())
        + stages_lines(ls)
    )


def stages_lines(ls: LoadedStudy) -> list[str]:
    """What the search's load stages sent, by class against the scenario's weights, and how
    many ended over-saturated or were cut by their time cap (nothing for a study without stages)."""
    weights = {c.name: c.weight for c in ls.scenario.workload.classes}
    sessions = ls.scenario.workload.sessions is not None
    line = stages_line([s for v in ls.views for s in v.stages], weights, sessions)
    return [line] if line else []


def stages_line(stages: list[StageView], weights: dict[str, float], sessions: bool = False) -> str | None:
    """One line on stages that stored their requests (None: none did). A session workload's
    classes are turn ranges: their mix follows the sessions a stage holds, not a quota order, so
    no deviation from the weights is claimed for it."""
    stages = [s for s in stages if sum(s.class_counts.values())]
    if not stages:
        return None
    sent: dict[str, int] = {}
    worst = 0.0
    for s in stages:
        for c, k in s.class_counts.items():
            sent[c] = sent.get(c, 0) + k
        worst = max(worst, mix_deviation(s.class_counts, weights))
    by_class = ", ".join(f"{c} {k:,}" for c, k in sent.items())
    over = sum(s.over_saturated is not None for s in stages)
    capped = sum(s.capped for s in stages)
    mix = (
        "their turn ranges as the stages' sessions made them"
        if sessions
        else f"each stage's classes within {worst:.2f} of a request of the scenario's weights"
    )
    return (
        f"the search's {len(stages)} load stages sent {sum(sent.values()):,} requests ({by_class}); {mix}; "
        f"{over} over-saturated at their end, {capped} cut by their time cap"
    )


def finish(console: Console, storage_url: str, study_name: str, out_dir: Path) -> None:
    """The end of a study in the terminal (the summary, the confirmation table, the verdict) and
    its files: best.yaml, pareto.yaml and the report (`autotune export` writes them again)."""
    with Session(open_db(storage_url)) as session:
        ls = load_study(session, storage_url, study_name)
        console.print(summary_table(ls))
        confirmed = confirmation_table(ls)
        if confirmed is not None:
            console.print(confirmed)
        for line in verdict_lines(ls):  # the headline first
            console.print(line, markup=False, highlight=False)
        done = export(session, storage_url, study_name, out_dir)
    if isinstance(done.best, NoBestYaml):
        stale = f"; the earlier {done.pareto.parent / 'best.yaml'} was removed" if done.best.removed_stale else ""
        console.print(f"[red]no best.yaml written[/]: {escape(done.best.why)}{stale}")
    else:
        how = "confirmed" if done.deployment.confirmed else "on single, unconfirmed measurements"
        console.print(
            f"deploy: trial {done.deployment.trial_number} ({how}); config for `vllm serve --config`: "
            f"[bold]{done.best.path}[/]"
        )
    console.print(f"feasible Pareto set: {done.pareto}")
    console.print(f"report: {write_report(storage_url, study_name, out_dir / REPORT_NAME)}")
