"""The study loop on a scripted executor: resume, de-duplication, budgets, lock, SIGTERM, events.

Real Optuna, real SQLite (in tmp_path), real scoring and diagnosis; no vLLM. The scenario is
tests/fixtures/scenarios/loop.yaml (one baseline, two integer knobs, absolute SLOs).
"""

import fcntl
import os
import re
import signal
from datetime import datetime
from types import SimpleNamespace

import optuna
import pytest
from optuna.trial import TrialState
from sqlalchemy.orm import Session

import search.pareto
import search.prepare
import search.study.loop
import search.study.planning
from app.outputs import DashboardPublisher
from app.outputs.export import load_study
from loadgen import CLIENT_BEHIND
from search.executor import CalibrationFailed, RetriedStart, TrialOutcome
from search.samplers import SAMPLERS, _grid
from search.study import MAX_CONSECUTIVE_LOAD_ERRORS, StudyBusy, StudyMismatch, StudyStopped
from search.study.events import StudyObserver
from search.study.recording import Recording
from search.trial_results import retried_of
from serving import Failure, FailureClass
from serving.process import ZygoteFailure, zygote_pool, zygote_status
from storage import database, queries
from storage.tables import TrialStatus
from tests.support.fakes import H100
from tests.support.fakes import ctx as fake_ctx
from tests.support.paths import FIXTURES
from tests.support.scripted_executor import ScriptedCalibration, ScriptedExecutor, failed_at, measured
from tests.support.study_loop import LOOP_SCENARIO, Recorder, optuna_trials, rows, runner

A = {"max_num_seqs": 8, "max_num_batched_tokens": 512}
B = {"max_num_seqs": 3, "max_num_batched_tokens": 300}


def interrupted_before_tell(self, *args, **kwargs):
    """Ctrl-C after the trial is stored and before Optuna is told: the narrowest window."""
    raise KeyboardInterrupt


def interrupt_on_call(n: int):
    calls = []

    def before(plan):
        calls.append(plan.number)
        if len(calls) == n:
            raise KeyboardInterrupt

    return before


def test_resume_finishes_a_running_trial_from_its_stored_record(tmp_path, monkeypatch):
    with monkeypatch.context() as patched, pytest.raises(KeyboardInterrupt):
        patched.setattr(Recording, "tell", interrupted_before_tell)
        runner(tmp_path, ScriptedExecutor(), trials=1).run()
    [stored] = rows(runner(tmp_path, ScriptedExecutor(), trials=1))
    assert optuna_trials(runner(tmp_path, ScriptedExecutor()))[0].state == TrialState.RUNNING

    again, events = ScriptedExecutor(), Recorder()
    r = runner(tmp_path, again, trials=1, observers=[events])
    r.run()
    assert again.plans == []  # not run a second time
    assert "trial 0: finished from its stored record" in events.notes
    [t] = optuna_trials(r)
    assert t.state == TrialState.COMPLETE and t.values == stored.values
    assert search.pareto.named_constraints(t) == stored.constraints and len(t.constraints) == len(stored.constraints)
    assert t.system_attrs["constraints"] == list(stored.constraints.values())  # what optuna-dashboard 0.21 reads
    [row] = rows(r)
    assert row.finished_at == stored.finished_at and row.metrics == stored.metrics


def test_resume_reruns_an_interrupted_trial_with_the_same_params(tmp_path):
    with pytest.raises(KeyboardInterrupt):  # trial 0 is the baseline; trial 1 is sampled, then killed
        runner(tmp_path, ScriptedExecutor(before=interrupt_on_call(2)), trials=2).run()
    killed = optuna_trials(runner(tmp_path, ScriptedExecutor()))[1]
    assert killed.state == TrialState.RUNNING and [
        r.trial_number for r in rows(runner(tmp_path, ScriptedExecutor()))
    ] == [0]

    again, events = ScriptedExecutor(), Recorder()
    r = runner(tmp_path, again, trials=2, observers=[events])
    r.run()
    assert "trial 1 was interrupted; it will run again" in events.notes
    trials = optuna_trials(r)
    assert trials[1].state == TrialState.FAIL
    [retry] = [t for t in trials if t.user_attrs.get("retry_of") == 1]
    assert retry.state == TrialState.COMPLETE and retry.params == killed.params
    assert [(p.number, p.params) for p in again.plans] == [(retry.number, killed.params)]
    assert [row.trial_number for row in rows(r)] == [0, retry.number]


def test_same_flags_reuse_the_earlier_result_without_starting_a_server(tmp_path):
    executor, events = ScriptedExecutor(), Recorder()
    r = runner(tmp_path, executor, trials=2, observers=[events])
    r.study.enqueue_trial(A)
    r.study.enqueue_trial(A)
    r.run()
    first, dup, baseline = rows(r)
    assert [p.number for p in executor.plans] == [0, 2]  # trial 1 never reached the executor
    assert (dup.status, dup.duplicate_of, dup.fingerprint) == ("duplicate", 0, first.fingerprint)
    assert dup.values == first.values and dup.metrics == first.metrics
    assert (dup.command, dup.log_path, dup.timings) == (first.command, first.log_path, {})
    assert optuna_trials(r)[1].values == first.values
    assert "trial 1: same flags as trial 0; reusing its result" in events.notes
    assert baseline.baseline == "vllm_defaults"


def test_budget_counts_server_starts_only(tmp_path):
    executor = ScriptedExecutor(script=lambda plan: (failed_at("precheck") if plan.params == B else measured)(plan))
    r = runner(tmp_path, executor, trials=2)
    for params in (B, B, A, A):  # rejected by the pre-check, its repeat, measured, its repeat
        r.study.enqueue_trial(params)
    r.run()
    stored = rows(r)
    assert [(row.status, row.failure_phase) for row in stored] == [
        ("failed", "precheck"),
        ("duplicate", "precheck"),
        ("ok", None),
        ("duplicate", None),
        ("ok", None),
    ]
    assert stored[-1].baseline == "vllm_defaults"  # the second start: the budget of 2 is spent
    assert len(executor.plans) == 3
    with Session(r.engine) as session:
        assert queries.server_starts(session, queries.require_study(session, "loop")) == 2


def test_stops_after_budget_times_five_proposals_that_never_start(tmp_path):
    executor, events = ScriptedExecutor(script=failed_at("precheck")), Recorder()
    r = runner(tmp_path, executor, trials=1, observers=[events])
    r.run()
    assert len(rows(r)) == 5 and len(optuna_trials(r)) == 5
    assert (
        "stopped after 5 proposals: the sampler keeps proposing configurations that never start; narrow the space"
    ) in events.notes
    assert all(row.status in ("failed", "duplicate") for row in rows(r))


def test_a_second_runner_on_the_same_study_is_refused(tmp_path):
    second = ScriptedExecutor()
    busy = []

    def run_second(plan):
        with pytest.raises(StudyBusy, match=rf"study 'loop' is being run by another process \(pid {os.getpid()}\)"):
            runner(tmp_path, second, trials=1).run()
        busy.append(plan.number)

    runner(tmp_path, ScriptedExecutor(before=run_second), trials=1).run()
    assert busy == [0] and second.plans == []

    # Refused before it touches anything: the SIGTERM handler is left as it was.
    def mine(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        with open(tmp_path / "loop" / ".lock", "a+") as held:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with pytest.raises(StudyBusy):
                runner(tmp_path, ScriptedExecutor(), trials=2).run()
            assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_sigterm_stops_the_loop_like_ctrl_c_and_leaves_the_trial_for_resume(tmp_path):
    received = []

    def before_the_loop(signum, frame):
        received.append(signum)

    def sigterm_on_second_trial(plan):
        if plan.number == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    events = Recorder()
    previous = signal.signal(signal.SIGTERM, before_the_loop)
    try:
        with pytest.raises(KeyboardInterrupt) as interrupted:
            runner(tmp_path, ScriptedExecutor(before=sigterm_on_second_trial), trials=3, observers=[events]).run()
        assert signal.getsignal(signal.SIGTERM) is before_the_loop and received == []  # restored, not called
    finally:
        signal.signal(signal.SIGTERM, previous)
    # Released by the loop itself: the traceback held here keeps run()'s frame (and its lock file) alive.
    assert interrupted.traceback
    with open(tmp_path / "loop" / ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError if still held
    assert events.events[-1] == ("study_finished", search.study.events.StudyFinished(completed=False))
    r = runner(tmp_path, ScriptedExecutor())
    assert [t.state for t in optuna_trials(r)] == [TrialState.COMPLETE, TrialState.RUNNING]
    assert [row.trial_number for row in rows(r)] == [0]  # trial 1 has no record: resume runs it again


def test_wall_time_budget_stops_the_loop(tmp_path, monkeypatch):
    clock = SimpleNamespace(now=1000.0)
    monkeypatch.setattr(search.study.loop, "time", SimpleNamespace(monotonic=lambda: clock.now))
    monkeypatch.setattr(search.study.planning, "time", SimpleNamespace(monotonic=lambda: clock.now))

    def ten_minutes(plan):
        clock.now += 600

    events = Recorder()
    r = runner(tmp_path, ScriptedExecutor(before=ten_minutes), trials=10, timeout_min=15, observers=[events])
    r.run()
    assert len(rows(r)) == 1  # 10 min in, 5 min left: a second trial of 10 min would overrun the budget
    assert "wall-time budget reached: 5.0 min left for the search, a trial about 10.0 min here" in events.notes


def test_baselines_are_enqueued_once(tmp_path):
    runner(tmp_path, ScriptedExecutor(), trials=1).run()
    r = runner(tmp_path, ScriptedExecutor(), trials=3)  # resumed with a bigger budget
    r.run()
    assert [row.baseline for row in rows(r)] == ["vllm_defaults", None, None]
    assert [t.user_attrs.get("baseline") for t in optuna_trials(r)] == ["vllm_defaults", None, None]


def test_a_pareto_snapshot_after_every_finished_trial(tmp_path):
    executor = ScriptedExecutor(script=lambda plan: (failed_at("startup") if plan.params == B else measured)(plan))
    r = runner(tmp_path, executor, trials=4)
    r.study.enqueue_trial(B)
    r.run()
    stored = rows(r)
    with Session(r.engine) as session:
        history = queries.front_history(session, queries.require_study(session, "loop"))
        snapshots = [
            (s.after_trial_number, s.n_finished, s.hypervolume, {m.trial_number for m in s.members}) for s in history
        ]
    assert [s[0] for s in snapshots] == [row.trial_number for row in stored]
    assert [s[1] for s in snapshots] == [1, 2, 3, 4]
    assert snapshots[0][3] == set() and snapshots[0][2] is None  # the failed trial 0: no front, no reference yet
    assert snapshots[-1][3] == {
        t.number for t in optuna.load_study(study_name="loop", storage=r.prep.storage_url).best_trials
    }
    assert snapshots[-1][2] > 0


def test_events_reach_every_subscriber_in_order(tmp_path):
    first, second = Recorder(), Recorder()
    r = runner(tmp_path, ScriptedExecutor(), trials=2, observers=[first, second])
    r.run()
    per_trial = ["trial_started", "phase", "phase", "phase", "phase", "trial_scored", "trial_recorded"]
    # the confirmation's line, the load, the plan (a closed loop's trials cannot be timed before one
    # ran), then after the first trial the pace it measured
    assert first.names == ["study_started", "note", "note", "note", *per_trial, "note", *per_trial, "study_finished"]
    assert first.notes[3].startswith("a trial here takes about 0.0 min (the mean of 1): about 1 more trials")
    assert first.notes[0] == "no confirmation phase (--confirm-runs 0): the single measurements decide"
    assert first.notes[2].startswith("plan: a trial's length is not known before the first one")
    assert [(n, e) for n, e in first.events if n != "study_started"] == [
        (n, e) for n, e in second.events if n != "study_started"
    ]
    started = first.events[0][1]
    assert (started.study_name, started.budget, started.study.study_name) == ("loop", 2, "loop")
    assert [e for n, e in first.events if n == "phase"][:4] == ["starting", "load", "stopping", "scoring"]
    trial0 = first.events[4][1]
    assert (trial0.number, trial0.baseline, trial0.label) == (0, "vllm_defaults", "trial 0 (baseline vllm_defaults)")
    scored = [e for n, e in first.events if n == "trial_scored"]
    assert [e.trial.number for e in scored] == [e.row.trial_number for e in scored] == [0, 1]
    recorded = [e for n, e in first.events if n == "trial_recorded"]
    assert [e.row.trial_number for e in recorded] == [row.trial_number for row in rows(r)]
    assert recorded[0].row.feasible and recorded[-1].best is not None
    assert first.events[-1][1].completed


class TrialStateWhenScored(StudyObserver):
    """What Optuna holds of each trial as the subscribers hear it was scored."""

    def __init__(self) -> None:
        self.states: list[TrialState] = []

    def trial_scored(self, event):
        self.states.append(event.trial.study.trials[event.trial.number].state)


def test_subscribers_hear_of_a_scored_trial_once_optuna_is_told(tmp_path):
    seen = TrialStateWhenScored()
    runner(tmp_path, ScriptedExecutor(), trials=2, observers=[seen]).run()
    assert seen.states == [TrialState.COMPLETE] * 2


def test_with_the_dashboard_subscriber_a_trial_carries_its_diagnosis_attrs_and_its_note(tmp_path):
    from optuna_dashboard import get_note

    r = runner(tmp_path, ScriptedExecutor(), trials=1, observers=[DashboardPublisher()])
    r.run()
    [t] = optuna_trials(r)
    [row] = rows(r)
    assert t.user_attrs["bottleneck"] == row.diagnosis["bottleneck"]
    assert t.user_attrs["diagnosis"] == row.diagnosis["headline"]
    assert t.user_attrs["feasible"] is True and t.user_attrs["status"] == "ok"  # the loop's own
    assert get_note(optuna.trial.Trial(r.study, t._trial_id)).startswith("## trial 0 (vllm_defaults): FEASIBLE")


def test_calibration_runs_once_on_the_injected_calibrate_and_is_stored(tmp_path):
    scenario = FIXTURES / "scenarios" / "loop_calibrated.yaml"
    calibrate, executor, events = (
        ScriptedCalibration(capacity_rps=8.0, ttft_median_ms=250.0),
        ScriptedExecutor(),
        Recorder(),
    )
    r = runner(tmp_path, executor, scenario=scenario, trials=1, observers=[events], calibrate=calibrate)
    r.run()
    assert calibrate.calls == 1 and events.names[2:4] == ["calibration_started", "phase"]
    assert executor.workload.arrival.rate == 4.0  # capacity_fraction 0.5 of 8 req/s
    assert set(rows(r)[0].constraints) == {
        "ttft_p95_ms<=1000",
        "error_rate<=0.01",
        "server_ok",
    }  # 4 x the unloaded 250 ms
    again = ScriptedExecutor()
    runner(tmp_path, again, scenario=scenario, trials=2, calibrate=calibrate).run()
    assert calibrate.calls == 1 and again.workload.arrival.rate == 4.0  # the stored calibration, replayed


def test_the_cli_subscribes_the_progress_display_and_the_dashboard(tmp_path, monkeypatch, capsys):
    from optuna_dashboard import get_note

    from app.cli import main
    from tests.support.fakes import ctx
    from tests.support.study_loop import LOOP_SCENARIO

    executor = ScriptedExecutor()
    monkeypatch.setattr(search.prepare, "launch_context", lambda model=None: ctx())
    monkeypatch.setattr(search.study.loop, "vllm_executor", lambda prep: executor.factory)
    storage = f"sqlite:///{tmp_path / 'cli.db'}"
    assert main(["search", str(LOOP_SCENARIO), "--trials", "1", "--storage", storage, "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "trial 0 (baseline vllm_defaults): scoring" in out
    assert "trial 0 (baseline vllm_defaults): output_throughput 160, ttft_p95_ms 1024; feasible" in out
    [t] = optuna.load_study(study_name="loop", storage=storage).trials
    assert "bottleneck" in t.user_attrs and len(executor.plans) == 1
    assert get_note(optuna.trial.Trial(optuna.load_study(study_name="loop", storage=storage), t._trial_id))


def test_a_percentile_that_a_run_cannot_pin_down_is_said_to_be_screened_before_the_first_trial(tmp_path):
    events = Recorder()
    runner(tmp_path, ScriptedExecutor(), trials=1, observers=[events]).run()
    # loop.yaml: 8 requests per run; ttft_p95_ms is an objective and an SLO, said once: the search
    # screens, the confirmation decides (no "decided by its slowest requests" warning)
    [note] = [n for n in events.notes if n.startswith("note: ttft_p95_ms")]
    assert note.startswith("note: ttft_p95_ms: the search phase reads it from ~8 requests per trial, a screen")
    assert "the confirmation decides" in note and not [n for n in events.notes if "slowest" in n]
    assert events.names.index("note") < events.names.index("trial_started")


@pytest.mark.parametrize(
    "elsewhere, said",
    [
        (dict(version="0.33.0"), "vLLM was vllm 0.32.0, now vllm 0.33.0"),
        # a GPU machine is its GPUs' model and count (Hardware.fingerprint), not the memory a driver reports
        (dict(hw=H100), "hardware was CPU test, 2 cores, 24 GiB RAM, now 1x NVIDIA H100 80GB HBM3"),
    ],
)
def test_a_resume_on_another_vllm_or_machine_is_refused_before_anything_runs(tmp_path, elsewhere, said):
    runner(tmp_path, ScriptedExecutor(), trials=1).run()
    again = ScriptedExecutor()
    with pytest.raises(StudyMismatch, match=re.escape(f"study 'loop' was measured elsewhere ({said})")):
        runner(tmp_path, again, trials=2, launch_ctx=fake_ctx(**elsewhere)).run()
    assert again.plans == []
    runner(tmp_path, again, trials=2).run()  # where it began, it resumes
    assert len(again.plans) == 1


def kv_bytes(plans) -> set[int]:
    return {p.server_args.flags["kv-cache-memory-bytes"] for p in plans}


def test_a_resume_keeps_the_cpu_kv_budget_the_study_began_with(tmp_path):
    r = runner(tmp_path, ScriptedExecutor(), trials=2)
    r.study.enqueue_trial(A)
    r.run()  # A, then the baseline, every server with memory_utilization 0.92 of 1 GiB
    with Session(r.engine) as session:
        assert queries.require_study(session, "loop").cpu_kv_budget_bytes == 2**30
    first_a = rows(r)[0]

    again, events = ScriptedExecutor(), Recorder()
    r = runner(tmp_path, again, trials=3, launch_ctx=fake_ctx(budget=2**29), observers=[events])  # less RAM free now
    r.study.enqueue_trial(A)
    r.run()
    assert (
        "warning: CPU KV budget: 1.00 GiB, as when study 'loop' began (this run alone would use 0.50 GiB); "
        "pass --study NEW_NAME to start a study on the new one. It is more than this run allows"
    ) in events.notes[0]
    assert kv_bytes(again.plans) == {int(0.92 * 2**30)}  # the same flags as before
    repeat = rows(r)[2]
    assert (repeat.status, repeat.duplicate_of, repeat.flags) == ("duplicate", first_a.trial_number, first_a.flags)


FAST = {"max_num_seqs": 32, "max_num_batched_tokens": 512}  # the most throughput: the rule's pick
SLOW = {"max_num_seqs": 8, "max_num_batched_tokens": 256}  # the fastest first token: on the front too


def client_behind_on(*lagging):
    def script(plan):
        out = measured(plan)
        if plan.params in lagging:
            out.metrics[CLIENT_BEHIND] = 1.0
        return out

    return script


@pytest.mark.parametrize(
    "lagging, pick, warned",
    [
        ((), FAST, False),
        ((FAST,), SLOW, False),  # its throughput came from a lighter load than planned: the next one
        ((FAST, SLOW), FAST, True),  # nothing measured right: the rule's pick, with a warning
    ],
)
def test_a_trial_whose_load_client_fell_behind_is_chosen_only_when_nothing_else_is_and_then_with_a_warning(
    tmp_path, lagging, pick, warned
):
    r = runner(tmp_path, ScriptedExecutor(script=client_behind_on(*lagging)), trials=3)
    r.study.enqueue_trial(FAST)
    r.study.enqueue_trial(SLOW)
    r.run()
    assert {t.params["max_num_seqs"] for t in search.pareto.front(r.study)} == {32, 8}
    chosen = r.chosen()
    assert chosen.params == pick
    with Session(r.engine) as session:
        lines = load_study(session, r.prep.storage_url, "loop").result_lines()
    warning = f"warning: trial {chosen.number} was chosen although its load client fell behind its schedule"
    assert any(line.startswith(warning) for line in lines) is warned


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_every_sampler_runs_a_short_study_past_its_startup_phase(tmp_path, name):
    """The baseline, then 8 server starts: past TPE's and GP's 3 random startup trials and
    NSGA-II's first generation of 4, so the model-guided part runs too."""
    executor = ScriptedExecutor()
    r = runner(tmp_path, executor, trials=9, sampler=name)
    r.run()
    assert (
        type(r.study.sampler).__name__
        == {
            "tpe": "TPESampler",
            "nsga2": "NSGAIISampler",
            "gp": "GPSampler",
            "random": "RandomSampler",
            "grid": "GridSampler",
            "diagnosis-tpe": "DiagnosisProposer",
            "sobol-tpe": "SpaceFillingStart",
            "diagnosis-sobol-tpe": "DiagnosisProposer",
        }[name]
    )
    stored, told = rows(r), optuna_trials(r)
    assert sum(row.status == "ok" for row in stored) == 9 and len(stored) == len(told)
    assert all(t.state == TrialState.COMPLETE for t in told)
    sampled = [t.params for t in told if "baseline" not in t.user_attrs]
    assert len(sampled) >= 8
    for params in sampled:  # within the space, and on the grid for the grid sampler
        assert set(params) == set(r.prep.dists)
        for k, v in params.items():
            assert r.prep.dists[k].low <= v <= r.prep.dists[k].high
            if name == "grid":
                assert v in _grid(r.prep.dists)[k]
    if name == "nsga2":
        assert max(t.system_attrs.get("NSGAIISampler:generation", 0) for t in told) >= 1
    assert search.pareto.front(r.study)


NO_MODEL = "http://127.0.0.1:41234 serves no model"
CALIBRATED = FIXTURES / "scenarios" / "loop_calibrated.yaml"


def load_error(plan):
    return TrialOutcome(
        status=TrialStatus.FAILED,
        failure=Failure(FailureClass.LOAD_ERROR, NO_MODEL, phase="load"),
        command=f"scripted {plan.server_args.flags}",
    )


def test_a_load_error_is_recorded_with_its_cause_and_the_study_goes_on(tmp_path):
    scripts = iter([load_error, measured, measured])
    executor = ScriptedExecutor(script=lambda plan: next(scripts)(plan))
    r = runner(tmp_path, executor, trials=3, observers=[DashboardPublisher()])  # it sets the "failure" attr
    r.study.enqueue_trial(A)
    r.study.enqueue_trial(A)  # the same flags: measured again, not taken as failed by the load generator
    r.run()
    stored = rows(r)
    assert [(row.status, row.failure_class, row.failure_phase, row.failure_line) for row in stored] == [
        ("failed", "load_error", "load", NO_MODEL),
        ("ok", None, None, None),
        ("ok", None, None, None),
    ]
    assert stored[1].duplicate_of is None and len(executor.plans) == 3
    assert optuna_trials(r)[0].user_attrs["failure"] == f"load_error (load): {NO_MODEL}"
    assert stored[0].diagnosis["headline"] == "The load generator failed (load_error); nothing was measured."


HUNG = "no token and no finished request for 15 s with 3 requests in flight (bound 15 s); /health answered 200"


def hung_twice(plan):
    """The executor's outcome when a trial's server hung, and the fresh server it got hung too."""
    failure = Failure(FailureClass.HANG, HUNG, phase="load")
    return TrialOutcome(
        status=TrialStatus.FAILED,
        failure=failure,
        command=f"scripted {plan.server_args.flags}",
        retried=[RetriedStart(failure, 41.0, None)],
    )


def test_a_trial_whose_servers_hung_is_recorded_as_a_hang_and_the_study_goes_on(tmp_path):
    scripts = iter([hung_twice, measured, measured])
    executor = ScriptedExecutor(script=lambda plan: next(scripts)(plan))
    r = runner(tmp_path, executor, trials=3)
    r.run()
    stored = rows(r)
    assert [(row.status, row.failure_class, row.failure_phase, row.failure_line) for row in stored] == [
        ("failed", "hang", "load", HUNG),
        ("ok", None, None, None),
        ("ok", None, None, None),
    ]
    assert [f.failure.cls for f in retried_of(stored[0])] == ["hang"]  # the first server's hang, kept
    assert not stored[0].feasible and len(executor.plans) == 3


def test_a_load_error_in_every_trial_stops_the_study_with_a_message(tmp_path):
    executor, events = ScriptedExecutor(script=load_error), Recorder()
    with pytest.raises(StudyStopped) as stopped:
        runner(tmp_path, executor, trials=10, observers=[events]).run()
    assert str(stopped.value).startswith(
        f"the load generator failed in {MAX_CONSECUTIVE_LOAD_ERRORS} trials in a row (each time: {NO_MODEL}); "
        "the fault is on the client side"
    )
    assert len(executor.plans) == MAX_CONSECUTIVE_LOAD_ERRORS
    r = runner(tmp_path, ScriptedExecutor(), trials=10)
    assert [row.failure_class for row in rows(r)] == ["load_error"] * MAX_CONSECUTIVE_LOAD_ERRORS  # recorded
    assert all(t.state == TrialState.COMPLETE for t in optuna_trials(r))  # told: nothing left to re-run
    assert events.events[-1] == ("study_finished", search.study.events.StudyFinished(completed=False))
    fixed = ScriptedExecutor()
    runner(tmp_path, fixed, trials=MAX_CONSECUTIVE_LOAD_ERRORS + 1).run()  # the cause fixed, it goes on
    assert len(fixed.plans) == 1


def test_load_errors_that_are_not_in_a_row_do_not_stop_the_study(tmp_path):
    flips = iter([load_error, measured] * 3)
    executor = ScriptedExecutor(script=lambda plan: next(flips)(plan))
    r = runner(tmp_path, executor, trials=6)
    r.run()
    assert [row.failure_class for row in rows(r)] == ["load_error", None] * 3


@pytest.mark.parametrize(
    "calibration, said",
    [
        (
            ScriptedCalibration(capacity_rps=0.0),
            "capacity 0.0 req/s (the saturation run completed 0 requests, 0 failed)",
        ),
        (
            ScriptedCalibration(ttft_median_ms=float("nan")),
            "unloaded ttft_median_ms is nan (no request of that kind completed)",
        ),
    ],
)
def test_a_calibration_that_measured_nothing_usable_is_not_stored(tmp_path, calibration, said):
    executor = ScriptedExecutor()
    with pytest.raises(
        StudyStopped,
        match=re.escape(f"calibration of study 'loop' measured nothing usable: {said} (log: {tmp_path / 'loop'}"),
    ):
        runner(tmp_path, executor, scenario=CALIBRATED, trials=1, calibrate=calibration).run()
    assert executor.plans == [] and calibration.calls == 1
    with Session(database.open_db(f"sqlite:///{tmp_path / 'loop.db'}")) as session:
        assert queries.require_study(session, "loop").calibration is None
    good = ScriptedCalibration()
    runner(tmp_path, executor, scenario=CALIBRATED, trials=1, calibrate=good).run()  # measured again
    assert good.calls == 1 and executor.workload.arrival.rate == 4.0


def test_a_calibration_whose_server_died_is_named_and_not_stored(tmp_path):
    def died(*args):
        raise CalibrationFailed("the vLLM-defaults server failed: oom (calibration): killed by SIGKILL")

    executor = ScriptedExecutor()
    with pytest.raises(
        StudyStopped,
        match=re.escape(
            "calibration of study 'loop' failed: the vLLM-defaults server failed: oom (calibration): killed by "
            "SIGKILL; nothing was stored; run the same command to calibrate again"
        ),
    ):
        runner(tmp_path, executor, scenario=CALIBRATED, trials=1, calibrate=died).run()
    assert executor.plans == []


def test_a_stored_calibration_that_cannot_scale_the_scenario_is_refused_on_resume(tmp_path):
    runner(tmp_path, ScriptedExecutor(), scenario=CALIBRATED, trials=1, calibrate=ScriptedCalibration()).run()
    with Session(
        database.open_db(f"sqlite:///{tmp_path / 'loop.db'}")
    ) as session:  # NaN, as an older version stored it
        rec = queries.require_study(session, "loop")
        rec.calibration = {**rec.calibration, "unloaded": {**rec.calibration["unloaded"], "ttft_median_ms": None}}
        session.commit()
    again = ScriptedExecutor()
    with pytest.raises(
        StudyStopped,
        match=re.escape(
            "the stored calibration of study 'loop' cannot scale the scenario: unloaded ttft_median_ms is None"
        ),
    ):
        runner(tmp_path, again, scenario=CALIBRATED, trials=2, calibrate=ScriptedCalibration()).run()
    assert again.plans == []


def test_recalibrate_replaces_the_calibration_of_a_study_without_trials(tmp_path):
    first = ScriptedCalibration(capacity_rps=8.0)
    with pytest.raises(KeyboardInterrupt):  # calibrated, then stopped before its first trial was stored
        runner(
            tmp_path, ScriptedExecutor(before=interrupt_on_call(1)), scenario=CALIBRATED, trials=1, calibrate=first
        ).run()
    again, executor = ScriptedCalibration(capacity_rps=16.0), ScriptedExecutor()
    r = runner(tmp_path, executor, scenario=CALIBRATED, trials=1, calibrate=again, recalibrate=True)
    r.run()
    assert (first.calls, again.calls) == (1, 1)
    assert executor.workload.arrival.rate == 8.0  # capacity_fraction 0.5 of the new 16 req/s
    with Session(r.engine) as session:
        assert queries.require_study(session, "loop").calibration["capacity_rps"] == 16.0


def test_recalibrate_is_refused_on_a_study_with_trials(tmp_path):
    first = ScriptedCalibration(capacity_rps=8.0)
    runner(tmp_path, ScriptedExecutor(), scenario=CALIBRATED, trials=1, calibrate=first).run()
    again, executor = ScriptedCalibration(capacity_rps=16.0), ScriptedExecutor()
    with pytest.raises(
        StudyMismatch,
        match=re.escape(
            "study 'loop' has 1 trial measured at its calibration; a new one would make them incomparable with "
            "the next. Pass --study NEW_NAME with --recalibrate to start a new study on a new calibration."
        ),
    ):
        runner(tmp_path, executor, scenario=CALIBRATED, trials=2, calibrate=again, recalibrate=True).run()
    assert again.calls == 0 and executor.plans == []
    r = runner(tmp_path, executor, scenario=CALIBRATED, trials=1)
    with Session(r.engine) as session:
        assert queries.require_study(session, "loop").calibration["capacity_rps"] == 8.0


def test_the_cli_says_why_a_study_stopped_in_one_line_and_refuses_recalibrate_with_trials(
    tmp_path, monkeypatch, capsys
):
    from app.cli import main
    from tests.support.fakes import ctx

    executor = ScriptedExecutor(script=load_error)
    monkeypatch.setattr(search.prepare, "launch_context", lambda model=None: ctx())
    monkeypatch.setattr(search.study.loop, "vllm_executor", lambda prep: executor.factory)
    args = [
        "search",
        str(LOOP_SCENARIO),
        "--trials",
        "5",
        "--storage",
        f"sqlite:///{tmp_path / 'cli.db'}",
        "--runs-dir",
        str(tmp_path),
        "--confirm-runs",
        "0",
    ]
    assert main(args) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"autotune: stopped: the load generator failed in 3 trials in a row (each time: {NO_MODEL})")
    assert main([*args, "--recalibrate"]) == 2
    assert capsys.readouterr().err.strip() == (
        "autotune: error: study 'loop' has 3 trials measured at its calibration; a new one would make them "
        "incomparable with the next. Pass --study NEW_NAME with --recalibrate to start a new study on a new "
        "calibration."
    )
    assert len(executor.plans) == 3


def test_a_retried_start_is_stored_with_its_trial_and_shown_in_the_progress_line(tmp_path):
    from rich.console import Console

    from app.outputs import StudyProgress

    lost = RetriedStart(
        Failure(FailureClass.KILLED, "the API server was killed by SIGKILL from outside"),
        12.3,
        str(tmp_path / "loop" / "trial-0000" / "server.1.log"),
    )

    def retried_once(plan):
        outcome = measured(plan)
        outcome.retried = [lost]
        return outcome

    console = Console(record=True, width=300)
    progress = StudyProgress(console)
    r = runner(tmp_path, ScriptedExecutor(script=retried_once), trials=1, observers=[progress])
    r.run()
    assert [retried_of(row) for row in rows(r)] == [[lost]]
    assert "after 1 retried start (killed, 12 s)" in console.export_text()


def test_with_the_dashboard_subscriber_the_study_writes_every_display_attr_and_else_only_what_it_needs(tmp_path):
    bare = runner(tmp_path, ScriptedExecutor(), trials=1)
    bare.run()
    [t] = optuna_trials(bare)
    study_needs = {"baseline", "worker", search.pareto.CONSTRAINT_NAMES_ATTR}
    assert set(t.user_attrs) == study_needs  # no subscriber: no display, nothing the trial's row holds
    assert optuna.load_study(study_name="loop", storage=bare.prep.storage_url).user_attrs == {"budget": 1}

    events = Recorder()
    r = runner(tmp_path / "published", ScriptedExecutor(), trials=1, observers=[DashboardPublisher(), events])
    r.run()
    [t], [row] = optuna_trials(r), rows(r)
    assert optuna.load_study(study_name="loop", storage=r.prep.storage_url).user_attrs == {
        "budget": 1,
        "scenario": "loop",
        "vllm": "vllm 0.32.0",
        "hardware": "CPU test, 2 cores, 24 GiB RAM",
        "notes": r.prep.space_notes + r.prep.baseline_notes,
    }
    assert {k: t.user_attrs[k] for k in ("status", "feasible", CLIENT_BEHIND, "violated", "adjustments")} == {
        "status": "ok",
        "feasible": True,
        CLIENT_BEHIND: False,
        "violated": [],
        "adjustments": [a["detail"] for a in row.adjustments],
    }
    assert {k[2:]: v for k, v in t.user_attrs.items() if k.startswith("m:")} == row.metrics
    [scored] = [e for n, e in events.events if n == "trial_scored"]
    assert scored.diagnosis.as_dict() == row.diagnosis and scored.failure is None


def test_a_resume_refused_before_it_starts_tells_its_subscribers_nothing(tmp_path):
    runner(tmp_path, ScriptedExecutor(), trials=1, observers=[DashboardPublisher()]).run()
    events = Recorder()
    with pytest.raises(StudyMismatch):
        runner(
            tmp_path,
            ScriptedExecutor(),
            trials=2,
            launch_ctx=fake_ctx(version="0.33.0"),
            observers=[DashboardPublisher(), events],
        ).run()
    assert events.events == []
    assert (
        optuna.load_study(study_name="loop", storage=f"sqlite:///{tmp_path / 'loop.db'}").user_attrs["vllm"]
        == "vllm 0.32.0"
    )  # the dashboard still shows where the study was measured


def test_the_kept_kv_budget_is_the_opened_studys_and_what_the_runner_was_given_stays_as_it_was(tmp_path):
    r = runner(tmp_path, ScriptedExecutor(), trials=2, confirm_runs=1)
    r.study.enqueue_trial(A)
    r.run()
    again = ScriptedExecutor()
    r = runner(tmp_path, again, trials=3, launch_ctx=fake_ctx(budget=2**29), confirm_runs=1)
    r.run()
    confirmed = [p for p in again.plans if p.run_name and p.run_name.startswith("confirm")]
    assert confirmed and len(confirmed) < len(again.plans)  # the search's trial and the confirmation runs
    assert kv_bytes(again.plans) == {int(0.92 * 2**30)}  # both on the budget the study began with
    assert r.prep.ctx.cpu_kv_budget_bytes == 2**29


def test_each_search_trial_is_planned_with_the_front_so_far(tmp_path):
    """The executor is told the feasible front when a trial is planned (a screened capacity search
    stops short of it): empty for the first trial, the earlier trials' objective values after."""
    executor = ScriptedExecutor()
    r = runner(tmp_path, executor, trials=3)
    r.run()
    fronts = [p.front for p in executor.plans]
    assert all(f is not None for f in fronts) and fronts[0].points == ()
    names = r.sc.objective_names
    assert set(fronts[0].directions) == set(names)
    assert fronts[-1].points and all(set(p) == set(names) for p in fronts[-1].points)
    assert {tuple(p.values()) for p in fronts[-1].points} <= {tuple(t.values) for t in optuna_trials(r)}


def test_the_study_says_its_zygotes_failures_at_its_end(tmp_path, monkeypatch):
    """Each zygote failure is a line in its server's log; the study's end says them all once, after
    the search and the confirmation (the progress display prints notes). Nothing when none failed."""
    failures = [
        ZygoteFailure(
            datetime(2026, 1, 2, 10, 2, 3), "the study's zygote (pid 812) is stopped (stopped) while importing vLLM"
        ),
        ZygoteFailure(datetime(2026, 1, 2, 10, 9, 30), "the study's zygote (pid 977) did not answer a ping within 5 s"),
    ]
    monkeypatch.setattr(zygote_pool, "_failures", failures)  # what this process's zygotes did, as zygote_status says
    events = Recorder()
    r = runner(tmp_path, ScriptedExecutor(), trials=2, confirm_runs=1, observers=[events])
    r.run()
    said = (
        "the study's zygote failed twice (10:02:03 (pid 812) is stopped (stopped) while importing vLLM; "
        "10:09:30 (pid 977) did not answer a ping within 5 s); later servers were exec'd"
    )
    assert zygote_status().summary() == said
    assert said in events.notes[-2:], events.notes[-3:]
    # after the confirmation, before the study's end
    assert events.names.index("confirmation_finished") < events.events.index(("note", said))
    assert events.names[-1] == "study_finished"

    monkeypatch.setattr(zygote_pool, "_failures", [])
    quiet = Recorder()
    runner(tmp_path / "quiet", ScriptedExecutor(), trials=1, observers=[quiet]).run()
    assert not any("zygote" in n for n in quiet.notes)
