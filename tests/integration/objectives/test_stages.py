"""Load stages against the stub server: early abort in run_load, and the capacity search end to
end (search.executor.staged_load, objectives.stages, loadrun, dispatch). The drain and the
prefix-cache reset between stages are tested with their modules
(tests/integration/loadgen/test_drain.py, tests/integration/vllm_http/test_reset_prefix_cache.py).

Stages are tiny (1-2.5 s) and rates a few req/s, so the file runs in well under 30 s. Timing
asserts leave generous margins: the stub runs on a thread of this process and the machine may
be busy.
"""

from __future__ import annotations

import asyncio
import math

import pytest

from loadgen import LoadOptions
from loadgen.loadrun import run_load
from loadgen.request_record import ABORTED
from loadgen.workload import WorkloadSpec
from objectives import stages as st
from objectives.capacity import SLO_CAPACITY_RPS, TARGET_ABORTED, interpolate
from objectives.early_abort import abort_check
from objectives.scoring import SLOSpec
from objectives.stages import CapacitySpec
from search.executor import StagedLoad, StageSearch, run_stages
from tests.support.stub_server import StubConfig, StubServer


def stub(tok_dir, tok, **kw) -> StubServer:
    return StubServer(StubConfig(root=str(tok_dir), **kw), tokenizer=tok)


def open_loop(rate: float, duration_s: float, warmup: int = 0, **kw) -> WorkloadSpec:
    """A run of `duration_s` at `rate`; in a capacity search, every stage holds its requests."""
    data = {
        "endpoint": "completions",
        "prompt_tokens": 20,
        "output_tokens": 4,
        "arrival": {"mode": "constant", "rate": rate},
        "duration_s": duration_s,
        "warmup_requests": warmup,
    }
    data.update(kw)
    return WorkloadSpec.model_validate(data)


def slo(metric: str, **bound) -> SLOSpec:
    return SLOSpec(metric=metric, **bound)


# -- run_load with an abort check -----------------------------------------------------------------

# 10 req/s for 3 s (30 planned), every TTFT 300 ms against p90 <= 100 ms: certain once
# 30 - floor(29 x 0.9) = 4 requests are 100 ms old without a token, about 1 s in.
ABORT_RATE, ABORT_S, ABORT_SLO = 10.0, 3.0, [SLOSpec(metric="ttft_p90_ms", max=100.0)]


def test_run_load_stops_once_the_slo_miss_is_certain(tok_dir, tok):
    spec = open_loop(ABORT_RATE, ABORT_S)
    with stub(tok_dir, tok, ttft_ms=300, itl_ms=0) as s:
        r = asyncio.run(run_load(s.base_url, None, spec, options=LoadOptions(abort=abort_check(ABORT_SLO, ABORT_RATE))))
        sent_to_stub = s.stats.requests
    assert r.abort is not None and "ttft_p90_ms" in r.aborted and r.abort.margin > 0
    assert r.requests_planned == 30 and r.planned_s == pytest.approx(3.0)
    assert r.duration_s < 0.7 * r.planned_s  # about 1 s of 3
    assert len(r.records) < 30 and sent_to_stub == len(r.records)  # sending stopped
    cut = [x for x in r.records if x.error_kind == ABORTED]
    others = [x for x in r.records if x.error_kind != ABORTED]
    assert cut and others  # some were in flight, some had finished
    assert all(x.aborted and not math.isnan(x.end_time) for x in cut)
    assert all(x.ok for x in others)
    m = r.flat()
    assert m["completed"] + m["failed"] == len(others)  # the cut ones are not measurements
    assert m["completed"] == len(others) and m["error_rate"] == 0
    assert m["ttft_p90_ms"] >= 300


def test_the_same_run_without_abort_runs_its_full_schedule(tok_dir, tok):
    spec = open_loop(ABORT_RATE, ABORT_S)
    with stub(tok_dir, tok, ttft_ms=300, itl_ms=0) as s:
        r = asyncio.run(run_load(s.base_url, None, spec))
        assert s.stats.requests == 30
    assert r.abort is None and r.aborted is None
    assert r.duration_s >= 3.0 + 0.3 - 0.05
    assert r.flat()["completed"] == 30 and not any(x.aborted for x in r.records)


# -- run_stages ---------------------------------------------------------------------------------


def test_stages_step_up_with_a_drain_and_a_reset_before_each(tok_dir, tok):
    """Always-met SLO: target 4 req/s (3 warm-ups), then 8 and 16 req/s, 6 requests each; the
    budget of 2 capacity stages ends it, capacity censored at 16. The stub stays busy 0.5 s after
    its last request: each capacity stage must wait for that, then reset the prefix cache, then send."""
    busy = 0.5
    workload = open_loop(4.0, 60.0, warmup=3, num_requests=6)
    spec = CapacitySpec(max_stages=2, step=2.0, idle_timeout_s=10, signal_steps=False, early_abort="certain")
    messages: list[str] = []
    with stub(tok_dir, tok, ttft_ms=20, itl_ms=0, busy_after_s=busy, record_events=True) as s:
        run = asyncio.run(
            run_stages(
                s.base_url, None, StagedLoad(workload, [slo("ttft_p90_ms", max=5000.0)], spec), on_stage=messages.append
            )
        )
        stats = s.stats
    stages = run.stages
    assert [x.kind for x in stages] == [st.TARGET, st.CAPACITY, st.CAPACITY]
    assert [x.index for x in stages] == [0, 1, 2]
    assert [x.rate for x in stages] == [4.0, 8.0, 16.0]  # up by `step` while the SLO holds
    assert [x.requests_planned for x in stages] == [6, 6, 6]  # the same requests at every rate
    assert [x.first_request for x in stages] == [0, st.STAGE_STRIDE, 2 * st.STAGE_STRIDE]  # each its own slice
    assert all(x.passed and x.aborted is None for x in stages)
    # each stage said as it starts, then with its verdict
    assert len(messages) == 6 and messages[0].startswith("stage 1/3 (target) at 4 req/s, 6 requests")
    assert messages[1].startswith("stage 1/3 (target) at 4 req/s, 6 requests: met")
    # warm-up in the target stage only: the stub saw 3 warm-ups and the measured requests
    assert len(run.target.warmup_records) == 3
    assert stats.requests == 3 + sum(x.requests_sent for x in stages) == 3 + 6 + 6 + 6
    # no drain or reset before the target; both before each capacity stage
    assert stages[0].idle_wait_s == 0 and stages[0].prefix_cache_reset is None
    assert all(x.prefix_cache_reset is True for x in stages[1:])
    assert all(x.idle_wait_s >= busy - 0.2 for x in stages[1:])
    assert stats.resets == 2
    # the time line: each reset came after the stub reported idle (busy_after_s past the last
    # request's end), and before every request of the next stage
    events = stats.events
    resets = [i for i, (kind, _) in enumerate(events) if kind == "reset"]
    for k, i in enumerate(resets):
        t_reset = events[i][1]
        last_end = max(t for kind, t in events[:i] if kind == "end")
        assert t_reset >= last_end + busy - 0.01
        assert any(kind == "idle" and t >= last_end + busy - 0.01 for kind, t in events[:i])
        assert sum(1 for kind, _ in events[:i] if kind == "arrive") == 3 + sum(x.requests_sent for x in stages[: k + 1])
    # the estimate: every rate met the SLO, so the capacity is at least the highest one
    est = run.capacity
    assert est.censored and est.rps == 16.0 and est.stages == 3
    metrics = run.metrics()
    assert metrics[SLO_CAPACITY_RPS] == 16.0 and metrics[TARGET_ABORTED] == 0.0
    assert metrics["slo_capacity_output_throughput"] > 0
    assert sum(st.idle_wait_s for st in run.stages) >= 2 * (busy - 0.2)


def test_stages_step_down_to_the_floor_when_every_rate_fails(tok_dir, tok):
    """Never-met SLO with early abort: target 20 req/s, then 10 and 5; 2.5 is below the floor
    (a quarter of the target), so the search ends there with capacity 0. Every stage is certain
    to miss about 0.5 s in."""
    workload = open_loop(20.0, 60.0, num_requests=40)
    spec = CapacitySpec(max_stages=6, step=2.0, idle_timeout_s=10)
    with stub(tok_dir, tok, ttft_ms=300, itl_ms=0) as s:
        run = asyncio.run(run_stages(s.base_url, None, StagedLoad(workload, [slo("ttft_p90_ms", max=50.0)], spec)))
        resets = s.stats.resets
    stages = run.stages
    assert [x.rate for x in stages] == [20.0, 10.0, 5.0]  # down by `step`, stopped at min_rate
    assert spec.search_settings(20.0).min_rate == 5.0
    assert all(x.aborted and not x.passed for x in stages)
    assert all(math.isfinite(x.margin) and x.margin > 0 for x in stages)  # the abort's lower bound
    assert all(x.requests_sent < x.requests_planned and x.saved_s > 0 for x in stages)
    assert resets == 2 and all(x.prefix_cache_reset for x in stages[1:])
    est = run.capacity
    assert est.rps == 0.0 and est.low is None and est.high == 5.0
    assert "misses the SLO even at 5 req/s" in est.summary
    metrics = run.metrics()
    assert metrics[TARGET_ABORTED] == 1.0 and metrics[SLO_CAPACITY_RPS] == 0.0
    assert metrics["slo_capacity_goodput"] == 0.0
    assert sum(1 for st in run.stages if st.aborted) == 3 and sum(st.saved_s for st in run.stages) > 0


def test_the_confirmations_target_stage_runs_in_full_and_only_its_capacity_stages_stop_early(tok_dir, tok):
    """`full_target`: a target stage stopped early reads its first, less loaded part, and the
    verdict pools those requests; the confirmation runs it out."""
    workload = open_loop(20.0, 60.0, num_requests=40)
    spec = CapacitySpec(max_stages=1, step=2.0, idle_timeout_s=10, early_abort="certain")
    with stub(tok_dir, tok, ttft_ms=300, itl_ms=0) as s:
        run = asyncio.run(
            run_stages(
                s.base_url,
                None,
                StagedLoad(workload, [slo("ttft_p90_ms", max=50.0)], spec, search=StageSearch(full_target=True)),
            )
        )
    target, capacity = run.stages
    assert target.aborted is None and target.requests_sent == target.requests_planned and not target.passed
    assert capacity.aborted and capacity.saved_s > 0


# One slot and 257 ms per stream: capacity 1 / 0.257 = 3.89 req/s. With constant arrivals every
# g seconds a request finds the slot free while g > 257 ms (TTFT 257 ms: the median SLO of
# 285 ms is met; a late send delays one request, then the queue drains); below that each
# request queues 257 ms - g longer than the one before. From 3 req/s with step 2 the search
# probes 3 (met), 6 (missed), sqrt(18) = 4.24 (missed: +21 ms a request, median about 330 ms
# over a stage of 8 requests), sqrt(3 x 4.24) = 3.57 (met: 23 ms spare between streams), then
# stops (max_stages). The stub drops the streams of an aborted stage, so drains are short.
STREAM_S = 0.257


def test_stages_bracket_a_real_capacity(tok_dir, tok):
    workload = open_loop(3.0, 60.0, num_requests=8)
    spec = CapacitySpec(
        max_stages=3,
        step=2.0,
        precision=0.05,
        idle_timeout_s=10,
        signal_steps=False,
        early_abort="certain",
    )
    with stub(tok_dir, tok, ttft_ms=STREAM_S * 1000, itl_ms=0, slots=1, cancel_on_disconnect=True) as s:
        run = asyncio.run(run_stages(s.base_url, None, StagedLoad(workload, [slo("ttft_median_ms", max=285.0)], spec)))
    stages = run.stages
    rates = [x.rate for x in stages]
    assert rates == pytest.approx([3.0, 6.0, math.sqrt(18), math.sqrt(3 * math.sqrt(18))])
    assert [x.passed for x in stages] == [True, False, False, True]
    assert stages[1].server_diagnostics["waiting_peak"] >= 1  # the stub queued
    est = run.capacity
    assert not est.censored and est.low == pytest.approx(rates[3]) and est.high == pytest.approx(rates[2])
    assert est.low <= 1 / STREAM_S <= est.high
    assert est.low <= est.rps <= est.high
    # a missed stage records a finite margin (measured, or the abort's lower bound); an aborted
    # one enters the search as missed by an unknown margin (its probe's is NaN), and the
    # estimate is what the bracketing stages' probes interpolate to
    assert all(math.isfinite(x.margin) and x.margin > 0 for x in stages if not x.passed)
    for x in stages:
        assert math.isnan(x.probe.margin) if x.aborted else x.probe.margin == x.margin
    # the capacity is the fit over every stage's counts, its interval holding the true one; the
    # bracketing stages' interpolation stays in the summary as the evidence
    assert est.fit_low <= 1 / STREAM_S <= est.fit_high and est.fit_low <= est.rps <= est.fit_high
    assert f"bracket: {interpolate(stages[3].probe, stages[2].probe):.3g} req/s" in est.summary
    assert run.metrics()[SLO_CAPACITY_RPS] == pytest.approx(est.rps)


# -- below the target, and the search phase's stops -------------------------------------------------


def test_stages_search_below_a_missed_target_each_holding_its_requests(tok_dir, tok):
    """The STREAM_S server (capacity 3.89 req/s) at a 6 req/s target misses; the search goes down
    to 3 (met), then bisects. Every stage holds the same 6 requests, so one below the target
    takes longer (6 / its rate), never holds fewer."""
    workload = open_loop(6.0, 60.0, num_requests=6)
    spec = CapacitySpec(
        max_stages=3,
        step=2.0,
        precision=0.3,
        idle_timeout_s=10,
        floor_fraction=0.25,
        signal_steps=False,
        early_abort="certain",
    )
    with stub(tok_dir, tok, ttft_ms=STREAM_S * 1000, itl_ms=0, slots=1, cancel_on_disconnect=True) as s:
        run = asyncio.run(run_stages(s.base_url, None, StagedLoad(workload, [slo("ttft_median_ms", max=285.0)], spec)))
    stages = run.stages
    rates = [x.rate for x in stages]
    assert rates == pytest.approx([6.0, 3.0, math.sqrt(18), math.sqrt(3 * math.sqrt(18))])
    assert [x.passed for x in stages] == [False, True, False, True]
    for x in stages[1:]:
        assert x.stage_requests == 6 and x.requests_planned == 6
        assert x.planned_s == pytest.approx(6 / x.rate, rel=0.05)  # the schedule's last arrival
    est = run.capacity
    assert est.rps > 0 and est.low <= 1 / STREAM_S <= est.high < 6.0
    assert run.metrics()[SLO_CAPACITY_RPS] == pytest.approx(est.rps)


def test_a_screened_trial_that_misses_its_target_runs_no_capacity_stage(tok_dir, tok):
    workload = open_loop(20.0, 60.0, num_requests=40)
    spec = CapacitySpec(max_stages=6, step=2.0, idle_timeout_s=10)
    with stub(tok_dir, tok, ttft_ms=300, itl_ms=0) as s:
        run = asyncio.run(
            run_stages(
                s.base_url,
                None,
                StagedLoad(workload, [slo("ttft_p90_ms", max=50.0)], spec, search=StageSearch(screen=True)),
            )
        )
    assert len(run.stages) == 1 and not run.stages[0].passed
    est = run.capacity
    assert (est.rps, est.low, est.high) == (0.0, None, 20.0)
    assert est.summary.startswith("below the target rate 20 req/s (screen")
    assert est.stop_reason == "target missed (screen)"
    assert any("trial stopped after this stage: target missed" in n for n in run.stages[0].notes)
    assert run.metrics()[SLO_CAPACITY_RPS] == 0.0
