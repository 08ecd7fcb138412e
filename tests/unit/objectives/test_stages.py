"""The stage loop's decisions that need no server (objectives.stages): the screened search's stop
when a bracket cannot reach the front, and the confirmation's target stage planned in full. The
loop itself, on a faked load run: tests/unit/search/test_executor_staged_load.py.
"""

from __future__ import annotations

import math

import pytest

from objectives import stages as st
from objectives.capacity import SLO_CAPACITY_RPS
from objectives.stages import CapacitySpec


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


def test_a_baselines_search_stops_once_it_misses_where_every_candidate_carries_more():
    """A baseline missed at the target (2 req/s); the confirmed candidates carry at least 3 beyond
    the practical threshold (`beaten_at` 2.5): its capacity lies below what they carry, decided,
    and the stages below the target (the longest) do not run. Above `beaten_at`, or without it,
    the search goes on down, as it does for a configuration that is not a baseline."""
    settings = CapacitySpec(max_stages=5, precision=0.1).search_settings(2.0)
    missed = [_stage(0, 2.0, 0.4, 900.0)]
    rate, why = st.search_step(missed, settings, beaten_at=2.5)
    assert rate is None and why.startswith("missed at 2 req/s, at or below 2.5")
    assert st.search_step(missed, settings, beaten_at=1.5)[0] is not None
    assert st.search_step(missed, settings)[0] is not None
    est = st.final_estimate(missed, settings, why)
    assert est.high == 2.0 and est.low is None and "stopped: missed at 2 req/s" in est.summary
    # Met at the target, missed one step up, still below what the candidates carry: decided too.
    bracketed = [_stage(0, 2.0, -0.3, 600.0), _stage(1, 2.4, 0.2, 900.0)]
    assert st.search_step(bracketed, settings, beaten_at=2.5)[0] is None
    assert st.search_step(bracketed, settings, beaten_at=2.2)[0] is not None


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
