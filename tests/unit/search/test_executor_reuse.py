"""Screening without a restart: where the measurement allows it, a trial that differs from the last
trial's server only in its scheduler limits, each at or below the start's, is measured on that
server after a live reconfiguration; anything else stops it and starts fresh; the confirmation
never reuses; the kept server stops when the executor closes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from loadgen.workload import WorkloadSpec
from objectives.diagnosis import Diagnosis
from objectives.scoring import Score
from search.executor import Measurement, TrialPlan, VllmExecutor, close_executor
from search.executor import vllm as executor_mod
from search.executor.reuse import reconfiguration
from search.scenario.sections import Screening
from search.trial_results import Placement, timings_of, trial_record
from serving import Failure, FailureClass, resolve_server_args
from serving.process import Reconfiguration, StopReport
from storage.tables import TrialStatus
from tests.support import fakes, study_loop
from tests.support.scripted_executor import ScriptedExecutor

BIG = {"max_num_seqs": 64, "max_num_batched_tokens": 2048, "long_prefill_token_threshold": 0}


class KeepableServer:
    zygote_failure = None  # as VllmServer: no zygote failed in its start

    def __init__(self, log_path, started: list):
        self.spec = type("Spec", (), {"log_path": log_path})()
        self.port, self.base_url, self.ready_s = 8000 + len(started), "http://127.0.0.1:1", None
        self.stopped, self.notes = 0, []
        started.append(self)

    def start(self):
        self.spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.ready_s = 30.0

    def stop(self, kill: bool = False):
        self.stopped += 1
        return StopReport(0.1, False, True, None)

    def poll_failure(self, phase):
        return None

    def note(self, line: str):
        self.notes.append(line)

    def start_anatomy(self):
        return None


@pytest.fixture
def world(tmp_path, monkeypatch):
    started: list[KeepableServer] = []
    measured_on: list[KeepableServer] = []
    answers: list[Reconfiguration] = []
    asked: list[dict] = []

    def answer(port, knobs):
        asked.append(knobs)
        return answers.pop(0) if answers else Reconfiguration("applied", values={k: v or 0 for k, v in knobs.items()})

    async def drained(*_args, **_kwargs):
        return 0.0, None

    monkeypatch.setattr(executor_mod, "launch", lambda ctx, args, log_path, **_: KeepableServer(log_path, started))
    monkeypatch.setattr(executor_mod, "reconfigure", answer)
    monkeypatch.setattr(executor_mod, "wait_idle", drained)
    monkeypatch.setattr(executor_mod, "prepare_requests", lambda *_: 0)
    monkeypatch.setattr(
        VllmExecutor,
        "_measure",
        lambda self, server, outcome, *_: (measured_on.append(server), outcome.metrics.update(completed=1.0)),
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
    full = Measurement(workload)

    def executor(reconfigure: bool) -> VllmExecutor:
        measurement = full.screened(Screening(reconfigure=reconfigure))
        return VllmExecutor(ctx, measurement, tmp_path)

    def plan(number: int, **config) -> TrialPlan:
        values = {**BIG, "memory_utilization": 0.5, **config}
        return TrialPlan(number, None, {}, values, resolve_server_args(values, ctx, where="t"), [])

    return executor, plan, started, measured_on, answers, asked, full


def test_a_trial_lower_only_in_the_scheduler_limits_is_measured_on_the_kept_server(world):
    executor, plan, started, measured_on, _answers, asked, _ = world
    ex = executor(True)
    first = ex.run(plan(1))
    second = ex.run(plan(2, max_num_seqs=8, max_num_batched_tokens=512, long_prefill_token_threshold=256))
    assert len(started) == 1 and measured_on == [started[0], started[0]]
    assert started[0].stopped == 0 and first.timings.stop_s is None  # kept, not stopped
    assert asked == [{"max_num_seqs": 8, "max_num_batched_tokens": 512, "long_prefill_token_threshold": 256}]
    reuse = second.timings.reuse
    assert reuse is not None and reuse.server == "trial-0001" and reuse.saved_start_s == 30.0 and reuse.declined is None
    assert second.timings.start_s is None and second.log_path == started[0].spec.log_path
    assert "trial-0002 is measured on this server" in started[0].notes[0]
    ex.close()
    assert started[0].stopped == 1


def test_the_trial_row_says_which_server_it_was_measured_on_and_the_start_it_saved(world):
    executor, plan, *_ = world
    ex = executor(True)
    ex.run(plan(1))
    second = plan(2, max_num_seqs=8)
    outcome = ex.run(second)
    placement: Placement = {"host": "h", "pid": 7, "slot": None, "neighbours": []}
    row = trial_record(2, second, outcome, Score([1.0], {}, True), Diagnosis("ok", "fine"), placement)
    assert row.timings["reuse"]["server"] == "trial-0001" and row.timings["reuse"]["saved_start_s"] == 30.0
    assert timings_of(row).reuse == outcome.timings.reuse
    ex.close()


@pytest.mark.parametrize(
    "config, why",
    [
        ({"max_num_seqs": 128}, "above the server's start value"),
        ({"memory_utilization": 0.6}, "differ in kv-cache-memory-bytes"),
    ],
)
def test_a_trial_that_does_not_qualify_stops_the_kept_server_and_starts_fresh(world, config, why):
    executor, plan, started, measured_on, _answers, asked, _ = world
    ex = executor(True)
    ex.run(plan(1))
    outcome = ex.run(plan(2, **config))
    assert len(started) == 2 and started[0].stopped == 1 and measured_on == started and asked == []
    assert outcome.timings.reuse is not None and why in outcome.timings.reuse.declined
    assert outcome.timings.start_s == 30.0
    ex.close()


def test_a_refused_reconfiguration_stops_the_kept_server_and_starts_fresh(world):
    executor, plan, started, measured_on, answers, _asked, _ = world
    answers.append(Reconfiguration("refused", "the server is not drained (2 running, 0 waiting)"))
    ex = executor(True)
    ex.run(plan(1))
    outcome = ex.run(plan(2, max_num_seqs=8))
    assert len(started) == 2 and started[0].stopped == 1 and measured_on == started
    assert "not drained" in outcome.timings.reuse.declined
    ex.close()


def test_without_the_option_every_trial_starts_fresh_and_stops_its_server(world):
    executor, plan, started, *_ = world
    ex = executor(False)
    ex.run(plan(1))
    ex.run(plan(2, max_num_seqs=8))
    assert len(started) == 2 and [s.stopped for s in started] == [1, 1]


def test_the_confirmation_measurement_never_reuses_a_server(world):
    *_, full = world
    assert full.screened(Screening(reconfigure=True)).reconfigure
    assert not full.reconfigure and not full.screened(None).reconfigure  # the confirmation runs `full`


def test_a_failed_trial_on_a_kept_server_stops_it(world, monkeypatch):
    executor, plan, started, *_ = world
    ex = executor(True)
    ex.run(plan(1))

    def fails(self, server, outcome, *_):
        raise RuntimeError("load generator broke")

    monkeypatch.setattr(VllmExecutor, "_measure", fails)
    monkeypatch.setattr(executor_mod, "load_failure", lambda e, server: Failure(FailureClass.LOAD_ERROR, str(e)))
    outcome = ex.run(plan(2, max_num_seqs=8))
    assert outcome.status is TrialStatus.FAILED and started[0].stopped == 1 and ex._kept is None


def test_closing_an_executor_stops_what_it_kept(world):
    executor, plan, started, *_ = world
    ex = executor(True)
    ex.run(plan(1))
    close_executor(ex)
    close_executor(ex)  # once stopped, nothing more
    assert started[0].stopped == 1


@pytest.mark.parametrize(
    "start, planned, ok",
    [
        ({"max-num-seqs": 64}, {"max-num-seqs": 64}, True),
        ({"max-num-seqs": 64}, {"max-num-seqs": 65}, False),
        ({}, {"max-num-seqs": 8}, True),  # the server checks against the default it resolved
        ({"max-num-seqs": 64}, {}, False),  # the plan's default is not known here
        ({"long-prefill-token-threshold": 0}, {"long-prefill-token-threshold": 256}, True),
        ({"long-prefill-token-threshold": 256}, {"long-prefill-token-threshold": 0}, False),
        ({"max-num-seqs": 64, "dtype": "bfloat16"}, {"max-num-seqs": 8, "dtype": "float16"}, False),
    ],
)
def test_which_plans_qualify(start, planned, ok):
    knobs, why = reconfiguration(start, planned, gpu=False)
    assert (knobs is not None) is ok and bool(why) is not ok


def test_on_a_gpu_only_a_fixed_kv_cache_qualifies():
    assert reconfiguration({"max-num-seqs": 64}, {"max-num-seqs": 8}, gpu=True)[0] is None
    fixed = {"kv-cache-memory-bytes": 2**30}
    assert reconfiguration({**fixed, "max-num-seqs": 64}, {**fixed, "max-num-seqs": 8}, gpu=True)[0] is not None


def test_a_screening_without_the_option_keeps_nothing(world):
    *_, full = world
    assert not replace(full, screen=True).reconfigure


class ClosingExecutors:
    """The scripted executor, each one the study builds closable, in the order things happen."""

    def __init__(self):
        self.inner, self.events = ScriptedExecutor(), []

    def factory(self, ctx, measurement):
        bound, events = self.inner.factory(ctx, measurement), self.events

        class Closing:
            def run(self, plan, on_phase):
                events.append("confirmation" if (plan.run_name or "").startswith("confirm") else "trial")
                return bound.run(plan, on_phase)

            def close(self):
                events.append("close")

        return Closing()


def test_the_study_closes_the_searchs_executor_before_its_confirmation_starts(tmp_path):
    executors = ClosingExecutors()
    r = study_loop.runner(tmp_path, executors, trials=2, confirm_runs=1)
    r.study.enqueue_trial({"max_num_seqs": 16, "max_num_batched_tokens": 1024})
    r.run()
    events = executors.events
    assert "confirmation" in events and events.count("close") == 1
    assert events.index("close") == max(i for i, e in enumerate(events) if e == "trial") + 1
