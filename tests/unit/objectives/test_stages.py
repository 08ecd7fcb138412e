"""The stage loop's decisions that need no server: the metric an early abort raised, and the
screened search's stop when a bracket cannot reach the front (objectives.stages).
"""

from __future__ import annotations

import asyncio
import math

import pytest

from objectives import stages as st
from objectives.capacity import SLO_CAPACITY_RPS
from objectives.stages import CapacitySpec
from objectives.stages import run as stage_run


async def _idle_at_once(base_url, timeout_s, watch=None):
    return 0.0, None


async def _no_reset_endpoint(base_url, watch=None):
    return None


def test_the_metric_that_aborted_a_stage_is_raised_to_its_certain_value(monkeypatch):
    """Requests cut short are left out of the partial numbers: without the fix the stage would
    report a TTFT tail under the bound it certainly broke."""
    from objectives.early_abort import Abort
    from objectives.stages import run as st

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

    from loadgen.workload import WorkloadSpec
    from objectives.scoring import SLOSpec

    wl = WorkloadSpec.model_validate(
        {"prompt_tokens": 8, "output_tokens": 4, "duration_s": 10, "arrival": {"mode": "poisson", "rate": 2.0}}
    )
    monkeypatch.setattr(stage_run, "run_load", fake_run_load)
    monkeypatch.setattr(stage_run, "wait_idle", _idle_at_once)  # before the capacity stage: no server to ask
    monkeypatch.setattr(stage_run, "reset_prefix_cache", _no_reset_endpoint)
    run = asyncio.run(
        st.run_stages(
            "http://127.0.0.1:9",
            None,
            st.StagedLoad(wl, [SLOSpec(metric="ttft_p95_ms", max=1000.0)], st.CapacitySpec(max_stages=1)),
        )
    )
    assert run.stages[0].metrics["ttft_p95_ms"] == 1500.0
    assert run.metrics()["ttft_p95_ms"] == 1500.0 and run.metrics()["target_aborted"] == 1.0
    assert run.stages[0].raised == "ttft_p95_ms"


def test_a_metric_that_failed_requests_reach_is_unknown_after_an_abort_never_a_number(monkeypatch):
    """The certain rule counted failed requests over the bound, and they reach the percentile:
    it has no value (`early_abort`), so the stage stores none, not the partial and not a bound."""
    from loadgen.workload import WorkloadSpec
    from objectives.early_abort import Abort
    from objectives.scoring import SLOSpec

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
    monkeypatch.setattr(stage_run, "run_load", fake_run_load)
    monkeypatch.setattr(stage_run, "wait_idle", _idle_at_once)
    monkeypatch.setattr(stage_run, "reset_prefix_cache", _no_reset_endpoint)
    run = asyncio.run(
        st.run_stages(
            "http://127.0.0.1:9",
            None,
            st.StagedLoad(wl, [SLOSpec(metric="ttft_p95_ms", max=1000.0)], st.CapacitySpec(max_stages=1)),
        )
    )
    target = run.stages[0]
    assert math.isnan(target.metrics["ttft_p95_ms"]) and target.raised is None
    assert not target.passed and target.margin > 0  # violated, by a margin a NaN metric is given


def _stage(index: int, rate: float, margin: float, ttft: float) -> st.StageResult:
    return st.StageResult(
        index=index,
        kind=st.TARGET if index == 0 else st.CAPACITY,
        rate=rate,
        planned_s=10.0,
        elapsed_s=10.0,
        margin=margin,
        violations={},
        metrics={"ttft_p95_ms": ttft},
        server_diagnostics={},
    )


def test_a_screened_bracket_that_cannot_reach_the_front_is_not_narrowed():
    """Met at 2 req/s (600 ms at the target), violated at 4: at best 4 req/s and 600 ms. A front
    member with 500 ms and 4.5 req/s is at least as good on both: the search stops."""
    from objectives.capacity import Front

    settings = CapacitySpec(max_stages=5, precision=0.1).search_settings()
    stages = [_stage(0, 2.0, -0.3, 600.0), _stage(1, 4.0, 0.4, 900.0)]
    dirs = {"ttft_p95_ms": "minimize", SLO_CAPACITY_RPS: "maximize"}
    beaten = Front(dirs, ({"ttft_p95_ms": 500.0, SLO_CAPACITY_RPS: 4.5},))
    reachable = Front(dirs, ({"ttft_p95_ms": 500.0, SLO_CAPACITY_RPS: 3.5},))
    rate, why = st.search_step(stages, settings, screen=True, front=beaten)
    assert rate is None and why.startswith("cannot reach the front")
    assert st.search_step(stages, settings, screen=True, front=reachable) == (pytest.approx(math.sqrt(8)), None)
    assert st.search_step(stages, settings, screen=False, front=beaten)[1] is None  # confirmation: in full
    est = st.final_estimate(stages, settings, why)
    assert est.stop_reason == why and "stopped: cannot reach the front" in est.summary
    assert est.low == 2.0 and est.high == 4.0


def test_a_decided_stage_is_planned_to_its_cap_and_a_drained_stop_is_no_abort(monkeypatch):
    """Under `decided` the target stage's schedule runs to its cap (1.5 x its 20 requests, 10 s at
    2 req/s); a stop that drains (decided after it ran on) is the stage's end, not an early abort:
    the target is complete, the stage's planned length is its nominal one, and its row says it ran on."""
    from loadgen.workload import WorkloadSpec
    from objectives.early_abort import Abort
    from objectives.scoring import SLOSpec
    from objectives.stages import run as st

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
    monkeypatch.setattr(stage_run, "run_load", fake_run_load)
    monkeypatch.setattr(stage_run, "wait_idle", _idle_at_once)
    monkeypatch.setattr(stage_run, "reset_prefix_cache", _no_reset_endpoint)
    run = asyncio.run(
        st.run_stages(
            "http://127.0.0.1:9",
            None,
            st.StagedLoad(
                wl,
                [SLOSpec(metric="ttft_p95_ms", max=1000.0)],
                st.CapacitySpec(max_stages=1),
                search=st.StageSearch(screen=True),
            ),
        )
    )
    target = run.stages[0]
    assert sent[0] == 30 and target.planned_s == 10.0
    assert target.aborted is None and run.metrics()["target_aborted"] == 0.0
    assert any("ran on past its 10 s" in n for n in target.notes)


def test_the_confirmations_target_stage_runs_as_planned_under_decided():
    """Not stoppable (the confirmation's target): its planned requests, no run-on, no looks. A
    capacity stage: planned to its cap, 1.5 x its requests, looked at under the decided rule."""
    from loadgen.workload import WorkloadSpec

    spec = CapacitySpec()
    wl = WorkloadSpec.model_validate(
        {"prompt_tokens": 8, "output_tokens": 4, "num_requests": 20, "arrival": {"mode": "poisson", "rate": 2.0}}
    )
    target = st.plan_stage(wl, spec, 20, 0, 2.0, stoppable=False)
    assert target.workload.num_requests == 20 and target.length is None and target.first_request == 0
    capacity = st.plan_stage(wl, spec, 20, 1, 4.0, stoppable=True)
    assert capacity.workload.num_requests == 30 and capacity.length.nominal_s == 5.0 and capacity.rule == "decided"
    assert capacity.length.cap_s == 7.5 and capacity.first_request == st.STAGE_STRIDE
