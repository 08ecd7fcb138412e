"""The stage loop (search.executor.staged_load) on a faked load run, no server: the metric an early
abort raised, a stop that drains, a capacity stage stopped as a likely pass; and the stages'
workloads a trial builds ahead, as the loop plans them (`StagedLoad`, the plan's one home)."""

from __future__ import annotations

import asyncio
import math

import pytest

from loadgen import Abort, WorkloadSpec
from objectives.scoring import SLOSpec
from objectives.stages import CapacitySpec
from search.executor import Measurement, StagedLoad, StageSearch, run_stages, staged_load
from search.trial_results import stage_columns


async def _idle_at_once(base_url, timeout_s, watch=None):
    return 0.0, None


async def _no_reset_endpoint(base_url, watch=None):
    return None


def test_the_metric_that_aborted_a_stage_is_raised_to_its_certain_value(monkeypatch):
    """Requests cut short are left out of the partial numbers: without the fix the stage would
    report a TTFT tail under the bound it certainly broke."""

    class Result:
        abort = Abort("ttft certain", 0.5, "ttft_p95_ms", 1500.0)
        aborted = "ttft certain"
        planned_s, duration_s, records, requests_planned, notes = 10.0, 4.0, [], 0, []

        def flat_metrics(self):
            return {"ttft_p95_ms": 400.0, "completed": 3.0}

        def server_diagnostics(self):
            return {}

    async def fake_run_load(*a, **k):
        return Result()

    wl = WorkloadSpec.model_validate(
        {"prompt_tokens": 8, "output_tokens": 4, "duration_s": 10, "arrival": {"mode": "poisson", "rate": 2.0}}
    )
    monkeypatch.setattr(staged_load, "run_load", fake_run_load)
    monkeypatch.setattr(staged_load, "wait_idle", _idle_at_once)  # before the capacity stage: no server to ask
    monkeypatch.setattr(staged_load, "reset_prefix_cache", _no_reset_endpoint)
    run = asyncio.run(
        run_stages(
            "http://127.0.0.1:9",
            None,
            StagedLoad(wl, [SLOSpec(metric="ttft_p95_ms", max=1000.0)], CapacitySpec(max_stages=1)),
        )
    )
    assert run.stages[0].metrics["ttft_p95_ms"] == 1500.0
    assert run.metrics()["ttft_p95_ms"] == 1500.0 and run.metrics()["target_aborted"] == 1.0
    assert run.stages[0].raised == "ttft_p95_ms"


def test_a_metric_that_failed_requests_reach_is_unknown_after_an_abort_never_a_number(monkeypatch):
    """The certain rule counted failed requests over the bound, and they reach the percentile:
    it has no value (`early_abort`), so the stage stores none, not the partial and not a bound."""

    class Result:
        abort = Abort("ttft certain (3 failed)", math.nan, "ttft_p95_ms", math.nan)
        aborted = "ttft certain (3 failed)"
        planned_s, duration_s, records, requests_planned, notes = 10.0, 4.0, [], 0, []

        def flat_metrics(self):
            return {"ttft_p95_ms": 400.0, "completed": 3.0}

        def server_diagnostics(self):
            return {}

    async def fake_run_load(*a, **k):
        return Result()

    wl = WorkloadSpec.model_validate(
        {"prompt_tokens": 8, "output_tokens": 4, "duration_s": 10, "arrival": {"mode": "poisson", "rate": 2.0}}
    )
    monkeypatch.setattr(staged_load, "run_load", fake_run_load)
    monkeypatch.setattr(staged_load, "wait_idle", _idle_at_once)
    monkeypatch.setattr(staged_load, "reset_prefix_cache", _no_reset_endpoint)
    run = asyncio.run(
        run_stages(
            "http://127.0.0.1:9",
            None,
            StagedLoad(wl, [SLOSpec(metric="ttft_p95_ms", max=1000.0)], CapacitySpec(max_stages=1)),
        )
    )
    target = run.stages[0]
    assert math.isnan(target.metrics["ttft_p95_ms"]) and target.raised is None
    assert not target.passed and target.margin > 0  # violated, by a margin a NaN metric is given


def test_a_decided_stage_is_planned_to_its_cap_and_a_drained_stop_is_no_abort(monkeypatch):
    """Under `decided` the target stage's schedule runs to its cap (1.5 x its 20 requests, 10 s at
    2 req/s); a stop that drains (decided after it ran on) is the stage's end, not an early abort:
    the target is complete, the stage's planned length is its nominal one, and its row says it ran on."""
    sent: list[float] = []

    class Result:
        abort = Abort("decided after 15 s (ran on past its 10 s while undecided): ...", passed=True, drain=True)
        aborted = abort.reason
        planned_s, duration_s, records, requests_planned, notes = 20.0, 15.5, [], 0, []

        def flat_metrics(self):
            return {"ttft_p95_ms": 400.0, "completed": 30.0}

        def server_diagnostics(self):
            return {}

    async def fake_run_load(base_url, model, workload, **k):
        sent.append(workload.num_requests)
        return Result()

    wl = WorkloadSpec.model_validate(
        {"prompt_tokens": 8, "output_tokens": 4, "num_requests": 20, "arrival": {"mode": "poisson", "rate": 2.0}}
    )
    monkeypatch.setattr(staged_load, "run_load", fake_run_load)
    monkeypatch.setattr(staged_load, "wait_idle", _idle_at_once)
    monkeypatch.setattr(staged_load, "reset_prefix_cache", _no_reset_endpoint)
    run = asyncio.run(
        run_stages(
            "http://127.0.0.1:9",
            None,
            StagedLoad(
                wl,
                [SLOSpec(metric="ttft_p95_ms", max=1000.0)],
                CapacitySpec(max_stages=1),
                search=StageSearch(screen=True),
            ),
        )
    )
    target = run.stages[0]
    assert sent[0] == 30 and target.planned_s == 10.0
    assert target.aborted is None and run.metrics()["target_aborted"] == 0.0
    assert any("ran on past its 10 s" in n for n in target.notes)


def test_a_capacity_stage_stopped_as_a_likely_pass_counts_as_passed(monkeypatch):
    """The likely rule may stop a capacity stage as a pass (never the target stage): the stage
    is met, its measured margin enters the capacity search, its row says why it stopped."""
    asked: list[bool] = []

    def fake_check(slos, rate, rule, capacity_stage=False, **decided):
        asked.append(capacity_stage)
        return None

    class Result:
        def __init__(self, abort):
            self.abort, self.aborted = abort, abort.reason if abort else None

        planned_s, duration_s, records, requests_planned, notes = 10.0, 6.0, [], 20, []

        def flat_metrics(self):
            return {"ttft_p95_ms": 400.0}

        def server_diagnostics(self):
            return {}

    async def fake_run_load(*a, **k):
        return Result(None if len(asked) == 1 else Abort("likely pass: P(every SLO met) = 0.97", passed=True))

    async def no_wait(*a, **k):
        return 0.0, None

    async def no_reset(*a, **k):
        return True

    monkeypatch.setattr(staged_load, "abort_check", fake_check)
    monkeypatch.setattr(staged_load, "run_load", fake_run_load)
    monkeypatch.setattr(staged_load, "wait_idle", no_wait)
    monkeypatch.setattr(staged_load, "reset_prefix_cache", no_reset)
    wl = WorkloadSpec.model_validate(
        {"prompt_tokens": 8, "output_tokens": 4, "num_requests": 20, "arrival": {"mode": "poisson", "rate": 2.0}}
    )
    run = asyncio.run(
        run_stages(
            "http://127.0.0.1:9",
            None,
            StagedLoad(
                wl,
                [SLOSpec(metric="ttft_p95_ms", max=1000.0)],
                CapacitySpec(max_stages=1, early_abort="likely"),
                search=StageSearch(screen=True),
            ),
        )
    )
    assert asked == [False, True]  # the target stage may not stop as a pass
    target, capacity = run.stages
    assert target.passed and capacity.passed and capacity.aborted.startswith("likely pass")
    assert capacity.probe.margin == pytest.approx(-0.6) and capacity.saved_s == pytest.approx(4.0)
    assert stage_columns(capacity)["passed"] is True and "met every SLO" in capacity.describe()


def test_a_baseline_that_misses_below_where_the_others_are_beaten_runs_no_capacity_stage(monkeypatch):
    """A confirmation's baseline missing the SLO at the target (2 req/s, 1,500 ms against 1,000),
    with the other candidates beating anything at or below 2.5 req/s: the loop stops after the
    target stage and says why; without `beaten_at` it searches down."""
    rates: list[float] = []

    class Result:
        abort = aborted = None
        planned_s, duration_s, records, requests_planned, notes = 10.0, 10.0, [], 20, []

        def flat_metrics(self):
            return {"ttft_p95_ms": 1500.0, "completed": 20.0}

        def server_diagnostics(self):
            return {}

    async def fake_run_load(base_url, model, workload, **k):
        rates.append(workload.arrival.rate)
        return Result()

    monkeypatch.setattr(staged_load, "run_load", fake_run_load)
    monkeypatch.setattr(staged_load, "wait_idle", _idle_at_once)
    monkeypatch.setattr(staged_load, "reset_prefix_cache", _no_reset_endpoint)
    wl = WorkloadSpec.model_validate(
        {"prompt_tokens": 8, "output_tokens": 4, "num_requests": 20, "arrival": {"mode": "poisson", "rate": 2.0}}
    )

    def run(search):
        rates.clear()
        load = StagedLoad(wl, [SLOSpec(metric="ttft_p95_ms", max=1000.0)], CapacitySpec(max_stages=3), search=search)
        return asyncio.run(run_stages("http://127.0.0.1:9", None, load))

    stopped = run(StageSearch(full_target=True, beaten_at=2.5))
    assert rates == [2.0] and stopped.capacity.high == 2.0
    assert "missed at 2 req/s, at or below 2.5" in stopped.capacity.summary
    assert any("trial stopped after this stage: missed at 2 req/s" in n for n in stopped.stages[0].notes)
    run(StageSearch(full_target=True))
    assert len(rates) == 4 and rates[1] < 2.0  # searched down: the target and three capacity stages


def test_the_stages_a_trial_builds_ahead_are_the_ones_the_loop_sends(monkeypatch):
    """`Measurement.stage_workloads` plans through the loop's own `StagedLoad.plan`: every stage's
    slice, warm-up and request count as sent (its rate aside), the confirmation's lengthened target
    stage run in full (its planned requests, no run-on) included."""
    sent: list[WorkloadSpec] = []

    class Result:
        abort, aborted = None, None
        planned_s, duration_s, records, requests_planned, notes = 10.0, 10.0, [], 20, []

        def flat_metrics(self):
            return {"ttft_p95_ms": 400.0}

        def server_diagnostics(self):
            return {}

    async def fake_run_load(base_url, model, workload, **k):
        sent.append(workload)
        return Result()

    monkeypatch.setattr(staged_load, "run_load", fake_run_load)
    monkeypatch.setattr(staged_load, "wait_idle", _idle_at_once)
    monkeypatch.setattr(staged_load, "reset_prefix_cache", _no_reset_endpoint)
    wl = WorkloadSpec.model_validate(
        {
            "prompt_tokens": 8,
            "output_tokens": 4,
            "num_requests": 20,
            "warmup_requests": 3,
            "arrival": {"mode": "poisson", "rate": 2.0},
        }
    )
    m = Measurement(
        wl,
        slos=(SLOSpec(metric="ttft_p95_ms", max=1000.0),),
        capacity=CapacitySpec(max_stages=2),
        full_target=True,
        target_requests=40,
    )
    load = m.staged_load()
    assert load is not None
    asyncio.run(run_stages("http://127.0.0.1:9", None, load))
    ahead = m.stage_workloads()
    assert len(ahead) == 3 and len(sent) >= 2

    def slice_of(w: WorkloadSpec) -> tuple:
        return w.first_request, w.num_requests, w.warmup_requests

    assert [slice_of(w) for w in sent] == [slice_of(w) for w in ahead[: len(sent)]]
    assert slice_of(sent[0]) == (0, 40, 3) and slice_of(ahead[1])[1:] == (30, 0)
    assert Measurement(wl).stage_workloads() == [wl]  # no `capacity:`: the one load run
