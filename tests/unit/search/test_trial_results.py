"""A trial's typed results, stored and read back through `search.trial_results`: what the
executor hands over is what the outputs and the verdict get again."""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path

from sqlalchemy.orm import Session

from loadgen import CLIENT_BEHIND
from objectives.capacity import SLO_CAPACITY_RPS, CapacityEstimate
from objectives.design_effect import OverCount
from objectives.diagnosis import Diagnosis
from objectives.scoring import Score
from objectives.stages import StageResult
from search import trial_results as tr
from search.executor import TrialPlan
from serving import Failure, FailureClass, FailurePhase, StartAnatomy, resolve_server_args
from storage import database, queries
from storage.tables import StudyRecord, TrialRecord, TrialStatus
from tests.support import fakes


def stage(index: int, **kw) -> StageResult:
    base = dict(
        index=index,
        kind="target" if index == 0 else "capacity",
        rate=2.0 * (index + 1),
        planned_s=20.0,
        elapsed_s=20.0,
        margin=-0.25,
        violations={},
        metrics={"ttft_p95_ms": 512.0, "tpot_p95_ms": math.nan},
        server_diagnostics={"kv_usage_peak": 0.5},
        idle_wait_s=0.5 if index else 0.0,
        prefix_cache_reset=True if index else None,
        requests_planned=40,
        requests_sent=40,
        notes=["a note"],
        samples={"sent_s": [0.0], "ok": [True]},
    )
    return StageResult(**{**base, **kw})


STAGES = [
    stage(0),
    # stopped early as a likely pass: `passed` is stored, `stopped_passing` is read back from it
    stage(1, elapsed_s=12.0, aborted="likely pass: P(every SLO met) = 0.97", stopped_passing=True),
    # stopped early on a certain miss, its margin unknown (NaN)
    stage(2, elapsed_s=5.0, margin=math.nan, violations={"ttft_p95_ms<=2000": 0.1}, aborted="certain", raised="x"),
]
CAPACITY = CapacityEstimate(3.1, 2.0, 4.0, 3, "3.1 req/s (met at 2, violated at 4)", stop_reason=None)
ANATOMY = StartAnatomy(phases={"import": 8.5, "health": None}, reported={"weights_s": 1.25})
OUTCOME = tr.TrialOutcome(
    status=TrialStatus.OK,
    metrics={"ttft_p95_ms": 512.0, SLO_CAPACITY_RPS: 3.1, CLIENT_BEHIND: 1.0},
    server_diagnostics={"kv_usage_peak": 0.5},
    timings=tr.Timings(
        start_s=30.0,
        load_s=60.0,
        stop_s=1.5,
        total_s=95.0,
        start_anatomy=ANATOMY,
        zygote_failure="the study's zygote (pid 812) did not answer a ping within 5 s",
    ),
    log_path=Path("/runs/trial-0001/server.log"),
    started_at=datetime(2026, 11, 25, 16, 0, 1),
    command="vllm serve ...",
    stages=STAGES,
    capacity=CAPACITY,
    retried=[
        tr.RetriedStart(Failure(FailureClass.KILLED, "killed", FailurePhase.STARTUP), 12.34, "/x/server.1.log"),
        tr.RetriedStart(
            Failure(FailureClass.HANG, "no token", FailurePhase.LOAD), 40.0, "/x/server.2.log", "the study's zygote x"
        ),
    ],
)
DIAGNOSIS = Diagnosis("queueing", "requests wait", evidence=["waiting 12"])


def same_stage(a: StageResult, b: StageResult) -> bool:
    def shown(s: StageResult) -> dict:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in vars(s).items()} | {
            "metrics": {k: None if math.isnan(v) else v for k, v in s.metrics.items()}
        }

    return shown(a) == shown(b) and a.passed == b.passed and a.saved_s == b.saved_s


def stored_trial(tmp_path, outcome: tr.TrialOutcome):
    ctx = fakes.ctx()
    plan = TrialPlan(1, "vllm_defaults", {}, {"max_num_seqs": 8}, resolve_server_args({"max_num_seqs": 8}, ctx), [])
    placement: tr.Placement = {"host": "h", "pid": 7, "slot": None, "neighbours": []}
    record = tr.trial_record(1, plan, outcome, Score([1.0], {"ttft<=2000": -0.5}, True), DIAGNOSIS, placement)
    engine = database.open_db(f"sqlite:///{tmp_path / 'x.db'}")
    session = Session(engine, expire_on_commit=False)
    study = StudyRecord(
        study_name="s",
        scenario_name="m",
        scenario_source="",
        scenario_digest="d",
        model_path="/m",
        vllm_version="v",
        hardware={},
        directions=[],
        objective_names=[],
    )
    session.add(study)
    session.flush()
    queries.save_trial(session, study, record)
    session.commit()
    session.expire_all()
    return session, queries.trial_records(session, study)[0]


def test_a_trials_results_read_back_as_the_executor_handed_them_over(tmp_path):
    session, row = stored_trial(tmp_path, OUTCOME)
    with session:
        assert tr.capacity_of(row) == CAPACITY and tr.capacity_of(row).censored is False
        back = tr.stages_of(row)
        assert len(back) == 3 and all(same_stage(a, b) for a, b in zip(back, STAGES))
        assert [s.passed for s in back] == [True, True, False]
        assert tr.retried_of(row) == [
            tr.RetriedStart(Failure(FailureClass.KILLED, "killed", FailurePhase.STARTUP), 12.3, "/x/server.1.log"),
            OUTCOME.retried[1],  # a zygote failure its start got past, kept in order
        ]
        assert tr.timings_of(row) == OUTCOME.timings
        assert tr.diagnosis_of(row) == DIAGNOSIS
        assert tr.failure_of(row) is None and row.client_behind is True
        assert row.metrics == {"ttft_p95_ms": 512.0, SLO_CAPACITY_RPS: 3.1, CLIENT_BEHIND: 1.0}


def test_a_failed_trial_reads_back_its_failure_and_no_capacity(tmp_path):
    failed = tr.TrialOutcome(
        status=TrialStatus.FAILED,
        failure=Failure(FailureClass.OOM, "CUDA out of memory", FailurePhase.LOAD),
        timings=tr.Timings(total_s=3.0),
    )
    session, row = stored_trial(tmp_path, failed)
    with session:
        assert tr.failure_of(row) == Failure(FailureClass.OOM, "CUDA out of memory", FailurePhase.LOAD)
        assert tr.capacity_of(row) is None and tr.stages_of(row) == [] and tr.retried_of(row) == []
        assert tr.timings_of(row) == tr.Timings(total_s=3.0)
        assert row.timings == {"total_s": 3.0}  # only what was measured


def test_a_confirmation_run_keeps_its_stages_and_capacity_in_its_own_row():
    run = tr.confirmation_record(4, None, 1, 7, OUTCOME, {"ttft<=2000": -0.5})
    assert (run.trial_number, run.round, run.sequence) == (4, 1, 7)
    assert tr.capacity_of(run) == CAPACITY
    assert all(same_stage(a, b) for a, b in zip(tr.stages_of(run), STAGES))
    assert tr.stages_of(run)[2].margin != tr.stages_of(run)[2].margin  # NaN, stored as null
    assert run.stages[2]["margin"] is None


def test_a_failure_class_this_build_does_not_know_reads_as_other():
    newer = TrialRecord(failure_class="a_class_from_a_newer_worker", failure_phase="load", failure_line="x")
    assert tr.failure_of(newer) == Failure(FailureClass.OTHER, "x", FailurePhase.LOAD)
    assert tr.failure_of(TrialRecord(failure_class=None)) is None


def test_a_stages_verdicts_and_the_capacity_fit_read_back(tmp_path):
    """The stage row keeps the stage's verdict and, per SLO, the count over the bound and its
    interval; the capacity keeps the fit's interval beside the bracket."""
    from dataclasses import replace

    from objectives.slo_verdict import counted_verdict, margin_verdict

    verdicts = [
        counted_verdict("ttft_p95_ms<=2000", OverCount(3, 41), 0.05, 0.1, most=82),
        margin_verdict("tpot_mean_ms<=50", math.nan),
    ]
    stages = [stage(0, verdicts=verdicts)]
    fitted = replace(CAPACITY, fit_low=2.6, fit_high=None, binding="ttft_p95_ms<=2000")
    session, row = stored_trial(tmp_path, replace(OUTCOME, stages=stages, capacity=fitted))
    with session:
        back = tr.stages_of(row)[0]
        assert row.stages[0].verdict == "violated"  # the mean's NaN violates; the count is undecided
        assert back.verdicts[0] == verdicts[0] and back.verdicts[0].over == 3 and back.verdicts[0].known == 41
        assert math.isnan(back.verdicts[1].margin) and back.verdict == "violated"
        assert tr.capacity_of(row) == fitted
