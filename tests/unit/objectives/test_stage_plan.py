"""Stages sized in requests (what the verdicts need, on any machine), each its own slice of the
workload's sequence, and judged only once the server settled and their counted mix holds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgen import GaugeSample, WorkloadSpec
from loadgen.prompts import plan_requests
from objectives import stages as st
from objectives.scoring import SLOSpec
from objectives.slo_verdict import MET, VIOLATED, decide, look_confidence

MIXED_SLOS = [
    SLOSpec(metric="ttft_p95_ms@short", max=500.0),
    SLOSpec(metric="tpot_p95_ms", max=100.0),
    SLOSpec(metric="error_rate", max=0.01),
]


def mixed_workload(**kw) -> WorkloadSpec:
    data = {
        "endpoint": "completions",
        "seed": 20261122,
        "duration_s": 600,
        "arrival": {"mode": "gamma", "burstiness": 0.5, "rate": 2.0},
        "classes": [
            {
                "name": "short",
                "weight": 0.7,
                "prompt_tokens": {"dist": "uniform", "low": 50, "high": 300},
                "output_tokens": 16,
            },
            {
                "name": "long",
                "weight": 0.3,
                "prompt_tokens": {"dist": "uniform", "low": 600, "high": 900},
                "output_tokens": 64,
            },
        ],
        **kw,
    }
    return WorkloadSpec.model_validate(data)


# -- sizing ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("limit, resolution", [(0.05, 2.0), (0.05, 4.0), (0.01, 4.0), (0.1, 3.0)])
def test_a_class_gets_the_fewest_requests_its_verdict_decides_both_ways_with(limit, resolution):
    """At the size returned, the verdict's interval (Clopper-Pearson at each look's confidence, at
    the expected count n x share) is below the limit for a share of limit/r and above it for one
    of r x limit; one request fewer, it is not both."""
    from scipy import stats

    per_look = look_confidence(0.9, 3)
    tail = (1 - per_look) / 2

    def decides(m: int) -> bool:
        k_met, k_violated = m * limit / resolution, min(m, m * limit * resolution)
        upper = stats.beta.ppf(1 - tail, k_met + 1, m - k_met)
        lower = stats.beta.ppf(tail, k_violated, m - k_violated + 1)
        return upper <= limit < lower

    n = st.class_requests_needed(limit, resolution, per_look)
    assert decides(n) and not decides(n - 1)
    # and the verdict itself agrees at whole counts just past it
    assert decide(math.floor(n * limit / resolution), n, limit, per_look)[0] == MET
    assert decide(math.ceil(n * limit * resolution), n, limit, per_look)[0] == VIOLATED


def test_a_stage_holds_the_binding_slos_class_requests_over_its_share():
    """mixed: the short-class p95 binds (its class is 70% of requests); the error rate does not
    size a stage; planned at the cap's 1/1.5, since an undecided stage runs on to its cap."""
    spec = st.CapacitySpec(resolution=4.0)
    size = spec.size(mixed_workload(), MIXED_SLOS)
    short = st.class_requests_needed(0.05, 4.0, look_confidence(0.9, spec.looks))
    assert size.most == math.ceil(short / 0.7) and size.requests == math.ceil(size.most / 1.5)
    assert size.binding.slo.startswith("ttft_p95_ms@short") and size.binding.class_requests == short
    assert not any(s.slo.startswith("error_rate") for s in size.by_slo)
    assert st.CapacitySpec(resolution=2.0).size(mixed_workload(), MIXED_SLOS).requests > size.requests
    assert "140 requests a stage, run on to 210 while undecided" in size.text()


def test_a_workloads_own_request_count_sizes_its_stages():
    size = st.CapacitySpec().size(mixed_workload(num_requests=50), MIXED_SLOS)
    assert (size.requests, size.most, size.given) == (50, 75, True)


# -- one stage as planned ----------------------------------------------------------------------------


def test_every_stage_holds_its_requests_at_any_rate_and_the_cap_says_what_it_cut():
    """The same 140 requests at 2 req/s take 70 s, at 0.2 req/s 700 s: beyond the 600 s cap, so
    the stage is capped and its verdict will say how much of its plan it held."""
    spec, wl = st.CapacitySpec(resolution=4.0), mixed_workload()
    fast = st.plan_stage(wl, spec, 140, 1, 2.0, stoppable=True)
    slow = st.plan_stage(wl, spec, 140, 1, 0.2, stoppable=True)
    assert fast.nominal_s == pytest.approx(70) and not fast.capped and fast.workload.num_requests == 210
    assert slow.capped and slow.length.cap_s == 600 and slow.workload.duration_s == 600
    assert "capped: stopped by its time cap of 600 s" in slow.cap_note(120) and "120 of its 140" in slow.cap_note(120)


def test_stage_k_sends_the_same_requests_in_every_trial_and_its_own_slice(tok):
    """Two configurations reach stage 2 at different rates: the same requests, only their arrival
    times differ. Stage 1 sends other requests than stage 2, the target stage others again."""
    spec, wl = st.CapacitySpec(resolution=4.0), mixed_workload()

    def requests(index: int, rate: float) -> list[tuple]:
        stage = st.plan_stage(wl, spec, 140, index, rate, stoppable=True).workload
        return [
            (p.class_name, p.target_prompt, tuple(p.pool[:8]))
            for p in plan_requests(stage, tok, 140, start=stage.first_request)
        ]

    assert requests(2, 3.1) == requests(2, 5.7)
    assert requests(1, 3.1) != requests(2, 3.1) != requests(0, 2.0)


def test_the_confirmations_target_stage_starts_with_the_screenings_requests(tok):
    """Lengthened for pooled percentiles, it sends the screened target's requests, then more of
    the same sequence (not another slice)."""
    spec, wl = st.CapacitySpec(resolution=4.0), mixed_workload()
    screened = st.plan_stage(wl, spec, 140, 0, 2.0, stoppable=True).workload
    confirmed = st.plan_stage(wl, spec, 250, 0, 2.0, stoppable=False).workload
    a = plan_requests(screened, tok, 140, start=screened.first_request)
    b = plan_requests(confirmed, tok, 250, start=confirmed.first_request)
    assert [(p.index, p.class_name, p.target_prompt) for p in a] == [
        (p.index, p.class_name, p.target_prompt) for p in b[:140]
    ]
    assert confirmed.schedule()[:5].tolist() != [] and screened.first_request == confirmed.first_request == 0


def test_a_burst_stage_spans_whole_cycles():
    wl = mixed_workload(arrival={"mode": "burst", "rate": 1.0, "period_s": 20.0, "duty": 0.25, "peak_multiplier": 4.0})
    stage = st.plan_stage(wl, st.CapacitySpec(), 100, 1, wl.arrival.mean_rate(), stoppable=False)
    assert stage.nominal_s == 60.0 and stage.workload.duration_s == 60.0 and stage.workload.num_requests is None


# -- steady state ----------------------------------------------------------------------------------


def _samples(sent: list[float], ttft: list[float | None]) -> dict[str, list]:
    n = len(sent)
    return {
        "class": ["short"] * n,
        "sent_s": sent,
        "ttft_s": ttft,
        "e2e_s": [t + 0.5 if t is not None else None for t in ttft],
        "output_tokens": [16] * n,
        "ok": [t is not None for t in ttft],
        "aborted": [False] * n,
    }


def test_a_queue_that_keeps_growing_is_over_saturated_even_in_a_short_stage():
    """Arrivals 1.5 x what the server serves for 12 s: each request waits a third of a second
    longer per second sent, and the waiting queue grows by a request every second."""
    sent = list(np.arange(0.0, 12.0, 0.25))
    samples = _samples(sent, [0.2 + 0.33 * t for t in sent])
    gauges = [GaugeSample(100.0 + t, 4.0, float(t), 0.5) for t in range(13)]
    steady = st.steady_state(samples, gauges, start=100.0, sending_s=12.0, end_s=13.0, rate=4.0)
    assert not steady.steady and steady.reason.startswith("over-saturated: still growing at its end")
    assert steady.verdict().verdict == VIOLATED and steady.verdict().basis == "steady"
    assert st.SteadyState.from_dict(steady.as_dict()) == steady


def test_bursts_that_drain_are_steady():
    """A bursty stage near capacity: the lag rises in each burst and falls back; no trend."""
    rng = np.random.default_rng(3)
    sent = list(np.sort(rng.uniform(0, 60, 150)))
    ttft = [0.3 + 0.6 * abs(math.sin(t / 4)) + rng.exponential(0.1) for t in sent]
    gauges = [GaugeSample(t, 6.0, 3.0 * abs(math.sin(t / 4)), 0.5) for t in range(61)]
    steady = st.steady_state(_samples(sent, ttft), gauges, start=0.0, sending_s=60.0, end_s=61.0, rate=2.5)
    assert steady.steady and steady.verdict().verdict == MET


def test_an_over_saturated_stage_is_violated_whatever_its_counts_and_bounds_the_capacity():
    """Its requests all met the TTFT bound, but its queue was still filling: the stage is
    violated (not met), and the capacity fit stays below its rate."""
    from objectives.capacity import SearchSettings
    from objectives.slo_verdict import SLOVerdict

    met = SLOVerdict("ttft_p95_ms<=500", MET, -0.5, 0.05, 0, 60, 0.0, 0.05, "interval")
    unsteady = st.SteadyState(False, (5.0, 20.0), None, None, "over-saturated").verdict()
    stages = [
        st.StageResult(0, st.TARGET, 2.0, 30.0, 30.0, -0.5, {}, {}, {}, verdicts=[met]),
        st.StageResult(1, st.CAPACITY, 4.0, 15.0, 15.0, -0.5, {}, {}, {}, verdicts=[met, unsteady]),
    ]
    assert stages[1].verdict == VIOLATED and not stages[1].passed
    estimate = st.final_estimate(stages, SearchSettings(max_stages=1), None)
    assert estimate.rps < 4.0


# -- class mix ---------------------------------------------------------------------------------------


def test_a_stage_whose_counted_requests_lost_a_class_is_never_met():
    sent = [float(i) for i in range(60)]
    samples = _samples(sent, [0.2] * 60)
    samples["class"] = ["short", "short", "long"] * 20
    samples["aborted"] = [c == "long" and i > 20 for i, c in enumerate(samples["class"])]  # the long ones cut
    mix = st.class_mix(samples)
    assert not mix.representative and mix.verdict().verdict == "undecided" and mix.verdict().leaning == VIOLATED
    whole = st.class_mix({**samples, "aborted": [False] * 60})
    assert whole.representative and whole.p == 1.0


# -- a capacity above saturation needs a steady stage there -------------------------------------------


def test_a_capacity_above_the_calibrated_saturation_needs_a_steady_stage_at_or_above_it():
    from objectives.capacity import CapacityEstimate

    estimate = CapacityEstimate(6.0, 4.0, None, 3, "at least 6 req/s", fit_low=5.0)
    ok = st.StageResult(1, st.CAPACITY, 4.0, 15.0, 15.0, -0.5, {}, {}, {})
    held = st.within_saturation(estimate, [ok], saturation_rps=5.0)
    assert held.rps == 5.0 and "held to the calibrated saturation throughput 5 req/s" in held.summary
    shown = st.StageResult(2, st.CAPACITY, 5.5, 15.0, 15.0, -0.5, {}, {}, {})
    assert st.within_saturation(estimate, [ok, shown], saturation_rps=5.0).rps == 6.0


def test_a_run_whose_queue_still_grows_at_its_end_is_judged_over_saturated():
    """A stage's judgement from its load run: every request met the 5 s TTFT bound, but the lag
    and the server's queue kept climbing, so the stage is violated and says why."""
    from loadgen import LoadResult, compute_metrics, records_from_samples

    sent = list(np.arange(0.0, 12.0, 0.25))
    samples = _samples(sent, [0.2 + 0.33 * t for t in sent])
    records = records_from_samples(samples, end_s=13.0)
    metrics = compute_metrics(records, 13.0, class_names=["short"])
    wl = mixed_workload(num_requests=48)
    planned = st.plan_stage(wl, st.CapacitySpec(), 48, 1, 4.0, stoppable=False)
    gauges = [GaugeSample(float(t), 4.0, float(t), 0.5) for t in range(13)]
    result = LoadResult("u", "m", "aiohttp", planned.workload, records, [], metrics, None, 0.0, 13.0, gauges=gauges)
    stage = st.judged_stage(planned, result, [SLOSpec(metric="ttft_p95_ms", max=5000.0)], 0.9, [])
    assert stage.verdicts[0].verdict == MET  # the counts alone
    assert stage.verdict == VIOLATED and not stage.passed and not stage.steady_ok
    assert any(n.startswith("over-saturated") for n in stage.notes)


def test_a_stage_cut_by_another_slos_miss_does_not_bound_the_capacity_by_its_steady_state():
    """Stages that all settled: the steady state bounds nothing, even where a stage was cut short
    by a certain TTFT miss (its steady state was judged on what it ran, and it settled)."""
    from objectives.capacity import SearchSettings
    from objectives.slo_verdict import SLOVerdict

    steady = st.SteadyState(True, (5.0, 60.0), None, None, "settled").verdict()

    def counted(over: int, known: int) -> SLOVerdict:
        return SLOVerdict("ttft_p95_ms<=500", MET, -0.2, 0.05, over, known, 0.0, 0.1, "interval")

    stages = [
        st.StageResult(0, st.TARGET, 1.0, 60.0, 60.0, -0.5, {}, {}, {}, verdicts=[counted(1, 140), steady]),
        st.StageResult(1, st.CAPACITY, 1.4, 60.0, 60.0, -0.2, {}, {}, {}, verdicts=[counted(5, 140), steady]),
        st.StageResult(
            2, st.CAPACITY, 1.6, 60.0, 20.0, 0.3, {}, {}, {}, aborted="certain", verdicts=[counted(9, 60), steady]
        ),
    ]
    estimate = st.final_estimate(stages, SearchSettings(max_stages=2), None)
    assert estimate.binding != "steady_state" and estimate.rps > 1.4
