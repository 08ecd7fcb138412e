"""The progress display's one-line trial summaries (plain console: no live panel)."""

import io
from types import SimpleNamespace

from rich.console import Console

from app.outputs import StudyProgress
from search.study.events import TrialRecorded
from storage.tables import TrialRecord, TrialStatus


def progress() -> tuple[StudyProgress, io.StringIO]:
    out = io.StringIO()
    p = StudyProgress(Console(file=out, width=200, force_terminal=False))
    p.objective_names = ["ttft_p95_ms@short", "output_throughput"]
    return p, out


def row(**kw) -> TrialRecord:
    fields = dict(
        trial_number=3,
        status=TrialStatus.OK,
        values=[12345.6, 98.7],
        metrics={"ttft_p95_ms@short": 12345.6, "output_throughput": 98.7, "failed": 0.0},
        feasible=True,
        client_behind=False,
        failure_class=None,
        failure_line=None,
    )
    return TrialRecord(**{**fields, **kw})


def test_a_measured_trial_shows_its_objectives_with_the_one_formatter_and_its_feasibility():
    p, out = progress()
    p.trial_recorded(TrialRecorded(row(), best=SimpleNamespace(number=3, values=[12345.6, 98.7])))
    assert p.last == "ttft_p95_ms@short 12,346, output_throughput 98.7; feasible"
    assert p.best == "trial 3: ttft_p95_ms@short 12,346, output_throughput 98.7"
    assert "12,346" in out.getvalue()


def test_an_objective_failed_requests_left_without_a_value_shows_no_value_never_its_penalty():
    p, out = progress()
    p.penalties = [60_000.0, 0.0]  # request timeout 60 s, as study_started sets them
    metrics = {"ttft_p95_ms@short": None, "failed@short": 2.0, "output_throughput": 98.7, "failed": 2.0}
    p.trial_recorded(TrialRecorded(row(values=[60_000.0, 98.7], metrics=metrics), best=SimpleNamespace(number=3)))
    assert p.last == "ttft_p95_ms@short no value (2 failed requests), output_throughput 98.7; feasible"
    assert p.best == "trial 3: ttft_p95_ms@short no value (2 failed requests), output_throughput 98.7"
    # a best recorded before this run (a resumed study): its told values, the penalty as no value
    p.trial_recorded(TrialRecorded(row(trial_number=4), best=SimpleNamespace(number=1, values=[60_000.0, 50.0])))
    assert p.best == "trial 1: ttft_p95_ms@short no value, output_throughput 50"
    assert "60,000" not in out.getvalue()


def test_a_failed_trial_shows_its_class_and_line_and_no_best_yet():
    p, _ = progress()
    p.trial_recorded(
        TrialRecorded(
            row(
                status=TrialStatus.FAILED,
                values=[1e9, 0.0],
                feasible=False,
                failure_class="kv_insufficient",
                failure_line="KV cache too small",
            ),
            best=None,
        )
    )
    assert p.last == "failed: kv_insufficient: KV cache too small"
    assert p.best == "no feasible trial yet"


def test_a_trial_whose_client_fell_behind_says_so():
    p, _ = progress()
    p.trial_recorded(TrialRecorded(row(feasible=False, client_behind=True), best=None))
    assert p.last.endswith("violates SLOs; CLIENT FELL BEHIND its schedule (load was lower than asked)")
