"""The end-of-study terminal summary: every trial of the search, what it measured (with the
differences from the baselines that the measured noise explains marked), the confirmation runs'
medians with their intervals, and the verdict in words."""

from __future__ import annotations

import math

from rich.markup import escape
from rich.table import Table

from objectives.statistics import beyond_noise
from search.outputs import verdict_text
from search.outputs.export import LoadedStudy
from search.outputs.format import fmt_interval, fmt_value, unit_of
from storage.models import TrialRecord, TrialStatus

WITHIN_NOISE = "~"


def _measured(row: TrialRecord) -> bool:
    return row.status == TrialStatus.OK or (row.status == TrialStatus.DUPLICATE and not row.failure_class)


def within_noise(ls: LoadedStudy, row: TrialRecord, metric: str) -> bool:
    """Whether the trial's single value of `metric` is within the stored run-to-run noise of
    some baseline's (False without a measured noise: nothing to discount)."""
    cv = (ls.record.noise or {}).get(metric)
    value = row.metrics.get(metric)
    if row.baseline or cv is None or not isinstance(value, (int, float)):
        return False
    for base in ls.baselines().values():
        ref = base.metrics.get(metric)
        if _measured(base) and isinstance(ref, (int, float)) and ref and math.isfinite(ref):
            if not beyond_noise(value / ref - 1.0, cv):
                return True
    return False


def summary_table(ls: LoadedStudy, max_rows: int = 40) -> Table:
    sc = ls.scenario
    deployment = ls.deployment()
    front = {t.number for t in ls.front}
    table = Table(title=f"study {ls.record.study_name}: scenario {sc.name}, {ls.record.vllm_version}, "
                        f"{ls.record.hardware.get('description')}: the search (one run per trial)")
    table.add_column("trial", justify="right")
    table.add_column("kind", no_wrap=True)
    for name, obj in zip(sc.objective_names, sc.objectives):
        table.add_column(f"{name} ({'max' if obj.direction == 'maximize' else 'min'})", justify="right")
    table.add_column("SLOs")
    table.add_column("parameters", overflow="fold")  # fold, not "…": a cut name says nothing
    rows = sorted(ls.trials.values(), key=lambda r: r.trial_number)[-max_rows:]
    for row in rows:
        mark = " *" if row.trial_number == deployment.trial_number else (" p" if row.trial_number in front else "")
        kind = row.baseline or ("duplicate" if row.status == TrialStatus.DUPLICATE else "search")
        if row.status == TrialStatus.FAILED or (row.status == TrialStatus.DUPLICATE and row.failure_class):
            values = ["-"] * len(sc.objective_names)
            slo = f"[red]failed: {row.failure_class}[/]"
        else:
            values = [fmt_value(row.metrics.get(n), digits=4) + (f" {WITHIN_NOISE}" if within_noise(ls, row, n) else "")
                      for n in sc.objective_names]
            violated = [k for k, v in row.constraints.items() if v > 0]
            slo = "[green]met[/]" if not violated else "[yellow]violated: " + ", ".join(violated) + "[/]"
            if row.client_behind:
                slo += " [red](client behind)[/]"
        params = " ".join(f"{k}={fmt_value(v)}" for k, v in row.params.items()) if not row.baseline else ""
        table.add_row(f"{row.trial_number}{mark}", kind, *values, slo, params)
    chosen = "deployed (confirmed)" if deployment.confirmed else "chosen (on single measurements)"
    caption = (f"* {chosen}   " if deployment.trial_number is not None else "") + "p on the feasible Pareto front"
    if ls.record.noise:
        caption += (f"   {WITHIN_NOISE} within the run-to-run noise of a baseline's value (noise from the "
                    "confirmation runs)")
    table.caption = caption
    return table


def _calls(ls: LoadedStudy, trial_number: int, baseline_number: int) -> str:
    cmp = ls.verdict.comparison(trial_number, baseline_number)
    if cmp is None:
        return "-"
    colour = {"win": "green", "loss": "red", "tie": "default"}
    return ", ".join(f"[{colour[c]}]{m} {c}[/]" for m, c in cmp.calls.items())


def confirmation_table(ls: LoadedStudy) -> Table | None:
    """One row per confirmed candidate: runs, each objective's median [95% interval], the SLOs
    on the confirmed medians, and its call against each baseline (None: no confirmation)."""
    v = ls.verdict
    if v is None:
        return None
    sc = ls.scenario
    planned = ls.record.confirmation["runs"]
    deployed = ls.deployment().trial_number
    table = Table(title=f"confirmation: {planned} runs per candidate on fresh servers, interleaved "
                        f"({v.runs_done} of {v.runs_planned} done); medians [95% interval]")
    table.add_column("candidate", no_wrap=True)
    table.add_column("runs ok", justify="right")
    for name, obj in zip(sc.objective_names, sc.objectives):
        table.add_column(f"{name} ({'max' if obj.direction == 'maximize' else 'min'})", justify="right")
    table.add_column("SLOs (confirmed medians)")
    for b in v.baselines:
        table.add_column(f"vs {b.baseline}")
    for c in v.candidates:
        ok = c.rounds - len(c.failures)
        slo = verdict_text.slo_margin(c)
        slo = f"[green]{escape(slo)}[/]" if c.feasible else f"[yellow]{escape(slo)}[/]"
        calls = ["" if c.baseline else _calls(ls, c.trial_number, b.trial_number) for b in v.baselines]
        values = [fmt_interval(c.metrics[n], unit=unit_of(n)) for n in sc.objective_names]
        mark = " *" if c.trial_number == deployed else ""
        table.add_row(f"{c.label}{mark}", f"{ok}/{planned}", *values, slo, *calls)
    table.caption = (("* deployed   " if deployed is not None else "")
                     + "win/loss: beyond the noise (95% interval of the difference excludes 0)")
    return table


def verdict_lines(ls: LoadedStudy) -> list[str]:
    """The verdict in full (every comparison, the noise, warnings), or what single measurements
    are worth; then the calibration reference with its spread."""
    text, note = ls.verdict_text(), ls.unconfirmed_note()
    return ((text.lines() if text is not None else []) + ([note] if note else [])
            + verdict_text.calibration_lines(ls.scenario, ls.calibration()))
