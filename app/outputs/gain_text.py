"""The gain a user came for, in one line: the deployed configuration's capacity under the SLO
and its primary latency against the reference baseline, each with its interval and the
difference the confirmation measured.

Its own room beside the headline (`verdict_headline`): what the numbers are, where the headline
says what to do. Pure: a `search.study.verdict.Verdict` and its scenario in, a line out.
"""

from __future__ import annotations

from dataclasses import replace

from app.outputs.format import fmt_difference, fmt_interval, fmt_ratio, fmt_value, unit_of
from app.outputs.verdict_headline import best_challenger
from loadgen import SessionSpec
from objectives.capacity import CAPACITY_KEYS, SLO_CAPACITY_RPS
from objectives.statistics import Interval
from search.scenario import Scenario
from search.study.verdict import CandidateResult, Outcome, Verdict, measured_metrics

BASELINE_NAMES = {"vllm_defaults": "vLLM defaults"}


def reference_name(c: CandidateResult) -> str:
    """How a comparison names its reference: a baseline by its name (a trial by its label)."""
    return c.baseline or c.label


def _latency_objective(scenario: Scenario) -> str | None:
    """The primary latency objective: the first objective measured in ms."""
    return next((m for m in scenario.objective_names if unit_of(m) == "ms"), None)


def _capacity_objective(scenario: Scenario) -> str | None:
    names = measured_metrics(scenario)
    return SLO_CAPACITY_RPS if SLO_CAPACITY_RPS in names else next((m for m in names if m in CAPACITY_KEYS), None)


def _gain_part(
    v: Verdict,
    metric: str,
    candidate: CandidateResult,
    reference: CandidateResult,
    what: str,
    as_ratio: bool,
    also: str = "",
) -> str:
    unit = unit_of(metric)
    cmp = v.comparison(candidate.trial_number, reference.trial_number)
    diff = cmp.diffs.get(metric) if cmp is not None else None
    name = reference_name(reference)
    name = BASELINE_NAMES.get(name, name)
    ours, theirs = candidate.metrics[metric], reference.metrics[metric]
    if as_ratio and theirs.value == 0 and theirs.low == 0 and theirs.high > 0 and ours.low > 0:
        # The reference met the SLO at no rate tried (a baseline's search stopped once beaten, or
        # one that missed down to the floor): its capacity is only bounded above, and so the
        # ratio only below.
        least = ours.low / theirs.high
        return (
            f"{what}: {fmt_interval(ours, unit=unit)}{also} vs {name} below {fmt_value(theirs.high)}: "
            f"at least {least:.1f}x"
        )
    text = f"{what}: {fmt_interval(ours, unit=unit)}{also} vs {name} {fmt_interval(theirs)}"
    if diff is not None:
        text += ": " + ((fmt_ratio(diff) if as_ratio else None) or fmt_difference(diff, unit))
    return text


def gain_headline(v: Verdict, scenario: Scenario) -> str | None:
    """The gain a user came for, in one line, the same in every output: `capacity under the SLO:
    2.11 req/s [2.03, 2.31] vs vLLM defaults 0.7 [0.6, 0.8]: 3.0x [2.6, 3.6]; ttft_p95_ms@short at the
    target load: 785 ms [766, 935] vs vLLM defaults 1,134 [1,128, 1,230]: -31% [-38, -17]`. The
    configuration recommended (or the best challenger of a kept baseline) against the reference
    baseline (the best feasible one, else the first); None without both."""
    if v.outcome == Outcome.INCOMPLETE:
        return None
    candidate = v.recommended if v.recommended is not None and not v.recommended.baseline else best_challenger(v)
    if candidate is None:
        candidate = next((c for c in v.candidates if not c.baseline), None)
    reference = v.reference or next(iter(v.baselines), None)
    if candidate is None or reference is None:
        return None
    parts = []
    if (capacity := _capacity_objective(scenario)) is not None:
        sessions = scenario.workload.sessions
        also = (
            f" ({_in_sessions(candidate.metrics[capacity], sessions)})"
            if capacity == SLO_CAPACITY_RPS and sessions is not None
            else ""
        )
        parts.append(_gain_part(v, capacity, candidate, reference, "capacity under the SLO", True, also))
    if (latency := _latency_objective(scenario)) is not None:
        parts.append(_gain_part(v, latency, candidate, reference, f"{latency} at the target load", False))
    return f"{candidate.label}: " + "; ".join(parts) if parts else None


def _in_sessions(rps: Interval, sessions: SessionSpec) -> str:
    """A capacity in requests/s as sessions/s: a session workload's capacity is counted in turns."""
    turns = sessions.mean_turns()
    scaled = replace(rps, value=rps.value / turns, low=rps.low / turns, high=rps.high / turns)
    return f"{fmt_interval(scaled, unit='sessions/s')} of {turns:.3g} turns"
