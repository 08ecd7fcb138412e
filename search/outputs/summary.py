"""The end-of-study table: every trial, what it measured, and which one was chosen."""

from __future__ import annotations

from rich.table import Table

from search.outputs.export import LoadedStudy
from search.outputs.format import fmt_value
from storage.models import TrialStatus


def summary_table(ls: LoadedStudy, max_rows: int = 40) -> Table:
    sc = ls.scenario
    chosen = ls.chosen()
    front = {t.number for t in ls.front}
    table = Table(title=f"study {ls.record.study_name}: scenario {sc.name}, {ls.record.vllm_version}, "
                        f"{ls.record.hardware.get('description')}")
    table.add_column("trial", justify="right")
    table.add_column("kind", no_wrap=True)
    for name, obj in zip(sc.objective_names, sc.objectives):
        table.add_column(f"{name} ({'max' if obj.direction == 'maximize' else 'min'})", justify="right")
    table.add_column("SLOs")
    table.add_column("parameters", overflow="fold")  # fold, not "…": a cut name says nothing
    rows = sorted(ls.trials.values(), key=lambda r: r.trial_number)[-max_rows:]
    for row in rows:
        mark = " *" if chosen is not None and row.trial_number == chosen.number else (
            " p" if row.trial_number in front else "")
        kind = row.baseline or ("duplicate" if row.status == TrialStatus.DUPLICATE else "search")
        if row.status == TrialStatus.FAILED or (row.status == TrialStatus.DUPLICATE and row.failure_class):
            values = ["-"] * len(sc.objective_names)
            slo = f"[red]failed: {row.failure_class}[/]"
        else:
            values = [fmt_value(row.metrics.get(n), digits=4) for n in sc.objective_names]
            violated = [k for k, v in row.constraints.items() if v > 0]
            slo = "[green]met[/]" if not violated else "[yellow]violated: " + ", ".join(violated) + "[/]"
            if row.client_behind:
                slo += " [red](client behind)[/]"
        params = " ".join(f"{k}={fmt_value(v)}" for k, v in row.params.items()) if not row.baseline else ""
        table.add_row(f"{row.trial_number}{mark}", kind, *values, slo, params)
    table.caption = "* chosen config   p on the feasible Pareto front"
    return table
