"""The executor's retry policy on a scripted server: a transient start failure is retried on the
same flags up to MAX_STARTS, each lost start recorded with its log kept; a deterministic one never."""

from __future__ import annotations

import pytest

from loadgen.workload import WorkloadSpec
from search.executor import MAX_STARTS, Measurement, TrialPlan, VllmExecutor
from search.executor import vllm as executor_mod
from serving import Failure, FailureClass, resolve_server_args
from serving.process import ServerFailed, StopReport
from storage.tables import TrialStatus
from tests.support import fakes


class ScriptedServer:
    """Fails its start (or its load) with the next scripted class, or serves; writes its log."""

    zygote_failure = None  # as VllmServer: no zygote failed in its start

    def __init__(self, script: list[FailureClass | None], flags_seen: list, log_path, args):
        self.script, self.log_path, self.ready_s = script, log_path, 1.0
        flags_seen.append(args.flags)

    def start(self):
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        executor_mod.set_aside(self.log_path)  # as VllmServer.start does
        cls = self.script.pop(0)
        self.log_path.write_text(f"start failing with {cls}\n")
        if cls is not None:
            raise ServerFailed(Failure(cls, f"{cls.value} line", phase="startup"))

    def stop(self, kill: bool = False):
        return StopReport(0.1, False, True, None)


@pytest.fixture
def world(tmp_path, monkeypatch):
    script: list[FailureClass | None] = []
    flags_seen: list = []
    monkeypatch.setattr(
        executor_mod, "launch", lambda ctx, args, log_path, **_: ScriptedServer(script, flags_seen, log_path, args)
    )
    monkeypatch.setattr(
        VllmExecutor, "_measure", lambda self, server, outcome, on_phase, *_: outcome.metrics.update(completed=10.0)
    )
    ctx = fakes.ctx()
    workload = WorkloadSpec.model_validate(
        {
            "endpoint": "completions",
            "prompt_tokens": 10,
            "output_tokens": 4,
            "arrival": {"mode": "poisson", "rate": 1.0},
            "num_requests": 4,
        }
    )
    ex = VllmExecutor(ctx, Measurement(workload), tmp_path)
    plan = TrialPlan(3, None, {}, {"max_num_seqs": 8}, resolve_server_args({"max_num_seqs": 8}, ctx, where="t"), [])
    return ex, plan, script, flags_seen, tmp_path / "trial-0003"


@pytest.mark.parametrize("cls", [FailureClass.PORT_BUSY, FailureClass.START_TIMEOUT, FailureClass.KILLED])
def test_a_transient_failure_is_retried_on_the_same_flags_and_recorded(world, cls):
    ex, plan, script, flags_seen, trial_dir = world
    script += [cls, None]
    outcome = ex.run(plan)
    assert outcome.status is TrialStatus.OK and outcome.failure is None
    assert flags_seen == [{"max-num-seqs": 8}] * 2
    assert [(r.failure.cls, r.failure.phase, r.failure.line) for r in outcome.retried] == [
        (cls, "startup", f"{cls.value} line")
    ]
    assert outcome.retried[0].seconds >= 0
    assert outcome.retried[0].log_path == str(trial_dir / "server.1.log")
    assert (trial_dir / "server.1.log").read_text() == f"start failing with {cls}\n"
    assert outcome.log_path == trial_dir / "server.log"
    assert (trial_dir / "server.log").read_text() == "start failing with None\n"


def test_retries_are_bounded_and_the_last_failure_is_the_trials(world):
    ex, plan, script, flags_seen, _trial_dir = world
    script += [FailureClass.KILLED] * (MAX_STARTS + 3)
    outcome = ex.run(plan)
    assert MAX_STARTS == 2
    assert len(flags_seen) == MAX_STARTS
    assert outcome.status is TrialStatus.FAILED and outcome.failure.cls is FailureClass.KILLED
    assert len(outcome.retried) == MAX_STARTS - 1


@pytest.mark.parametrize(
    "cls",
    [
        FailureClass.INVALID_FLAG,
        FailureClass.INVALID_CONFIG,
        FailureClass.KV_INSUFFICIENT,
        FailureClass.OOM,
        FailureClass.OTHER,
    ],
)
def test_a_deterministic_failure_is_never_rerun(world, cls):
    ex, plan, script, flags_seen, _ = world
    script += [cls, None]
    outcome = ex.run(plan)
    assert len(flags_seen) == 1
    assert outcome.status is TrialStatus.FAILED and outcome.failure.cls is cls
    assert outcome.retried == []


def test_a_precheck_rejection_starts_nothing(world):
    ex, plan, _script, flags_seen, _ = world
    plan.problems = ["max_num_batched_tokens (64) must be greater than or equal to max_num_seqs (128)"]
    outcome = ex.run(plan)
    assert flags_seen == [] and outcome.failure.phase == "precheck" and outcome.retried == []


@pytest.mark.parametrize("hangs", [1, 2])
def test_a_hang_under_load_gets_one_fresh_server_and_a_second_hang_fails_the_trial(world, monkeypatch, hangs):
    ex, plan, script, flags_seen, _ = world
    script += [None, None]
    line = "no token and no finished request for 16 s with 3 requests in flight (bound 15 s); /health did not answer"
    left = [hangs]
    killed: list[bool] = []

    def measure(self, server, outcome, on_phase, *_):
        if left[0]:
            left[0] -= 1
            raise ServerFailed(Failure(FailureClass.HANG, line, phase="load"))
        outcome.metrics.update(completed=10.0)

    monkeypatch.setattr(VllmExecutor, "_measure", measure)
    monkeypatch.setattr(ScriptedServer, "stop", lambda self, kill=False: killed.append(kill))
    outcome = ex.run(plan)
    assert flags_seen == [{"max-num-seqs": 8}] * 2  # the same flags, on a second server
    assert [(r.failure.cls, r.failure.phase, r.failure.line) for r in outcome.retried] == [
        (FailureClass.HANG, "load", line)
    ]
    assert killed == [True, hangs == 2]  # a hung server is killed, not asked to stop
    if hangs == 1:
        assert outcome.status is TrialStatus.OK and outcome.failure is None and outcome.metrics == {"completed": 10.0}
    else:
        assert outcome.status is TrialStatus.FAILED and outcome.failure.cls is FailureClass.HANG


ZYGOTE_KILLED = "the study's zygote (pid 812) did not answer a ping within 5 s"


def test_a_zygote_failure_a_retried_start_got_past_is_its_note_after_the_first_servers_hang(world, monkeypatch):
    """The first server hangs under load; the retry's start finds the study's zygote hung, kills
    it and is forked by a new one: the trial lists the hang as its lost start, then the zygote's
    failure as a note on the start that measured it, not as a second lost start."""
    ex, plan, script, _flags_seen, _ = world
    script += [None, None]
    hang = "no token and no finished request for 16 s with 3 requests in flight (bound 15 s)"
    starts = iter([None, ZYGOTE_KILLED])
    original_start = ScriptedServer.start

    def start(self):
        self.zygote_failure = next(starts)
        original_start(self)

    measured = iter([ServerFailed(Failure(FailureClass.HANG, hang, phase="load")), None])

    def measure(self, server, outcome, on_phase, *_):
        if (failure := next(measured)) is not None:
            raise failure
        outcome.metrics.update(completed=10.0)

    monkeypatch.setattr(ScriptedServer, "start", start)
    monkeypatch.setattr(VllmExecutor, "_measure", measure)
    outcome = ex.run(plan)
    assert outcome.status is TrialStatus.OK
    assert [(r.failure.cls, r.zygote_failure) for r in outcome.retried] == [(FailureClass.HANG, None)]
    assert outcome.timings.zygote_failure == ZYGOTE_KILLED


def test_a_start_the_zygote_failed_is_retried_and_keeps_its_zygote_lines(world, monkeypatch):
    ex, plan, script, flags_seen, _ = world
    script += [FailureClass.ZYGOTE, None]
    starts = iter([ZYGOTE_KILLED, None])
    original_start = ScriptedServer.start

    def start(self):
        self.zygote_failure = next(starts)
        original_start(self)

    monkeypatch.setattr(ScriptedServer, "start", start)
    outcome = ex.run(plan)
    assert outcome.status is TrialStatus.OK and len(flags_seen) == 2
    assert [(r.failure.cls, r.zygote_failure) for r in outcome.retried] == [(FailureClass.ZYGOTE, ZYGOTE_KILLED)]
    assert outcome.timings.zygote_failure is None
