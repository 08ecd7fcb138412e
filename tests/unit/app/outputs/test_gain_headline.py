"""The verdict's gain in one line, and how differences, bounds and brackets are written."""

import math

from app.outputs import gain_text, verdict_basis, verdict_text
from app.outputs.format import fmt_bracket, fmt_difference, fmt_interval, fmt_ratio
from objectives import statistics as st
from objectives.capacity import SLO_CAPACITY_RPS
from search.study.confirmation import pooled_plan
from search.study.verdict import decide
from tests.unit.search.test_verdict_measures import SCENARIO, run


def _verdict(candidate_caps, reference_caps):
    runs = [run(0, k, 785.0 + 10 * k, r, r / 1.2, r * 1.2) for k, r in enumerate(candidate_caps)]
    runs += [
        run(1, k, 1134.0 + 10 * k, r, r / 1.2 if r else None, r * 1.2 if r else 0.89, baseline="vllm_defaults")
        for k, r in enumerate(reference_caps)
    ]
    return decide(runs, SCENARIO, [0, 1], runs_per_candidate=3)


def test_the_headline_states_the_capacity_gain_as_a_ratio_with_the_latency_beside_it():
    v = _verdict((2.11, 2.03, 2.31), (0.7, 0.6, 0.8))
    text = verdict_text.describe(v, SCENARIO)
    line = text.gain
    assert line.startswith("trial 0: capacity under the SLO: 2.11 req/s [")
    assert " vs vLLM defaults 0.700 [" in line and "]: 3.0x [" in line
    assert "; ttft_p95_ms at the target load: 795 ms [" in line and "%" in line.rsplit(":", 1)[1]
    assert line in text.summary_lines() and line in text.lines()  # every output prints one of these


def test_a_session_workloads_capacity_is_stated_in_sessions_per_second_too():
    from loadgen import WorkloadSpec

    v = _verdict((2.2, 2.0, 2.4), (0.7, 0.6, 0.8))
    sessions = WorkloadSpec.model_validate(
        {
            "endpoint": "chat",
            "arrival": {"mode": "poisson", "capacity_fraction": 0.5},
            "duration_s": 60,
            "sessions": {"turns": 4, "user_tokens": 20, "output_tokens": 8},
        }
    )
    scenario = SCENARIO.model_copy(update={"workload": sessions})
    line = gain_text.gain_headline(v, scenario)
    assert line.startswith(
        "trial 0: capacity under the SLO: 2.20 req/s [1.67, 2.88] (0.550 sessions/s [0.417, 0.720] of"
    )
    assert " of 4 turns) vs vLLM defaults 0.700 [" in line
    assert "sessions/s" not in gain_text.gain_headline(v, SCENARIO)


def test_against_a_baseline_that_met_no_rate_tried_the_gain_is_a_lower_bound():
    """The defaults missed at every rate their runs tried, 0.89 req/s the lowest (a search stopped
    once beaten, or one down to its floor): their capacity is only bounded above, and the ratio
    only below, the candidate's interval's low end over that bound. The comparison itself is the
    absolute difference, a win."""
    v = _verdict((2.11, 2.03, 2.31), (0.0, 0.0, 0.0))
    line = gain_text.gain_headline(v, SCENARIO)
    assert "capacity under the SLO: 2.11 req/s [1.69, 2.77] vs vLLM defaults below 0.89: at least 1.9x;" in line
    assert v.comparison(0, 1).calls[SLO_CAPACITY_RPS] == "win"
    assert v.comparison(0, 1).diffs[SLO_CAPACITY_RPS].kind == "absolute"


def test_bounds_brackets_and_absolute_differences_are_labelled():
    assert (
        fmt_interval(st.Interval(1470.0, 1128.0, 1470.0, 3, at_least=True), unit="ms")
        == "at least 1,470 ms [1,128, 1,470]"
    )
    assert fmt_interval(st.Interval(0.0, 0.0, 0.89, 3), unit="req/s") == "0.000 req/s [0.000, 0.890]"
    assert fmt_bracket(2.86, 4.04) == "[2.86, 4.04)" and fmt_bracket(4.0, 4.0) == ">= 4"
    assert fmt_bracket(0.0, 0.89) == "< 0.89"
    diff = st.Difference(2.11, 1.9, 2.3, 3, kind="absolute")
    assert fmt_difference(diff, "req/s").startswith("+2.11 req/s [+1.90, +2.30] absolute")
    assert fmt_ratio(diff) is None
    assert fmt_ratio(st.Difference(2.0, 1.6, 2.6, 3)) == "3.0x [2.6, 3.6]"
    assert fmt_ratio(st.Difference(math.nan, math.nan, math.nan, 0)) is None


def test_each_runs_bracket_and_each_bound_is_named_in_the_notes():
    v = _verdict((2.11, 2.03, 2.31), (0.0, 0.0, 0.0))
    notes = verdict_basis.bound_notes(v, SCENARIO)
    assert any(n.startswith("trial 0: slo_capacity_rps run by run lies in [1.76, 2.53), ") for n in notes)
    assert any(
        "vllm_defaults (trial 1): slo_capacity_rps run by run lies in < 0.89, < 0.89, < 0.89" in n for n in notes
    )
    assert any("ttft_p95_ms, tpot_p95_ms read as the median of its runs" in n for n in notes)  # no samples stored


def test_a_thin_pool_lengthens_the_target_stage_then_adds_runs_and_says_what_it_costs():
    from loadgen import WorkloadSpec
    from search.executor import Measurement

    def measurement(duration_s: float) -> Measurement:
        return Measurement(
            WorkloadSpec.model_validate(
                {
                    "duration_s": duration_s,
                    "arrival": {"mode": "poisson", "rate": 0.8},
                    "prompt_tokens": 64,
                    "output_tokens": 16,
                }
            )
        )

    plan = pooled_plan(["ttft_p95_ms", SLO_CAPACITY_RPS], measurement(30), 3, run_s=120.0, n_candidates=4)
    # 24 requests per run: 3 runs pool 72 (4 above the p95); a 42 s stage pools 100 (5)
    assert plan.runs == 3 and plan.measurement.workload.duration_s == 42
    assert plan.measurement.full_target and not measurement(30).full_target  # its target stages run in full
    assert plan.lines[0].startswith("ttft_p95_ms: ~24 requests per run, so 3 runs pool 72 with 4 above")
    assert plan.lines[-1] == (
        "the confirmation's target stage runs duration_s 42 instead of 30 (+12 s of load a run) "
        "so that every percentile is read from enough pooled requests"
    )
    assert pooled_plan(["ttft_p95_ms"], measurement(30), 6).measurement.workload.duration_s == 30  # 144 pooled
    plan = pooled_plan(["ttft_p95_ms"], measurement(5), 3, run_s=60.0, n_candidates=2)  # 4 a run: 3x, then runs
    assert plan.measurement.workload.duration_s == 15 and plan.runs == 9
    assert plan.lines[-1] == "the confirmation runs 9 runs per candidate instead of 3 (+12 runs, about 12 min more)"
    plan = pooled_plan(["ttft_p95_ms"], measurement(2), 3)
    assert plan.runs == 10 and "lengthen the target stage" in plan.lines[0]
