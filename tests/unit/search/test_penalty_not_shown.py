"""A served trial whose objective has no value (a percentile that failed requests reach) is told
to Optuna as a penalty (loop.yaml: request timeout 60 s, so 60,000 ms), stored as no value, and
shown as `no value (N failed requests)` by every output: the penalty is never shown as measured."""

from __future__ import annotations

import math

import optuna
from optuna_dashboard import get_note
from rich.console import Console
from sqlalchemy.orm import Session

from app.outputs import DashboardPublisher, StudyProgress, load_study, summary_table
from app.outputs.figures import pareto_figure
from app.outputs.figures.style import hover
from app.outputs.read_model import trial_views
from storage import database
from tests.support.scripted_executor import ScriptedExecutor, measured
from tests.support.study_loop import optuna_trials, rows, runner

PENALTY_MS = 60_000.0


def failed_requests_reach_the_p95(plan):
    outcome = measured(plan)
    outcome.metrics.update({"ttft_p95_ms": math.nan, "failed": 3.0, "completed": 5.0})
    return outcome


def test_a_penalty_told_to_the_sampler_is_shown_as_no_value_never_as_a_measurement(tmp_path):
    console = Console(record=True, width=300)
    r = runner(
        tmp_path,
        ScriptedExecutor(script=failed_requests_reach_the_p95),
        trials=1,
        observers=[StudyProgress(console), DashboardPublisher()],
    )
    r.run()
    [row], [told] = rows(r), optuna_trials(r)
    assert told.values[1] == PENALTY_MS == row.values[1]  # what the sampler ranks on
    assert row.metrics["ttft_p95_ms"] is None  # what was measured: nothing

    line = console.export_text()
    assert "output_throughput 160, ttft_p95_ms no value (3 failed requests)" in line
    assert "60,000" not in line and "6e+04" not in line
    note = get_note(optuna.trial.Trial(r.study, told._trial_id))
    assert "| ttft_p95_ms | no value (3 failed requests) |" in note
    assert "Optuna's value for ttft_p95_ms is the penalty told to the sampler" in note

    with Session(database.open_db(r.prep.storage_url)) as session:
        ls = load_study(session, r.prep.storage_url, "loop")
        [view] = trial_views(ls)
        names = ls.scenario.objective_names
        assert "ttft_p95_ms: no value (3 failed requests)" in hover(view, names)
        drawn = [y for trace in pareto_figure([view], names, ls.scenario.directions).data for y in trace.y or ()]
        assert drawn and PENALTY_MS not in drawn  # at the worst edge, as a trial with no value
        table = Console(record=True, width=300)
        table.print(summary_table(ls))
        assert "no value (3 failed requests)" in table.export_text()
