"""The cost of serving in words, where the study has a price (`search.study.price`): for each
confirmed candidate, dollars per million output tokens and per million requests at its confirmed
capacity under the SLO, each with its interval, and its cost against vLLM's defaults'. A closed
loop without a capacity search (a batch job: its users send as fast as the server answers) is
priced at its confirmed throughput instead, the rate it sustains at the workload's concurrency.

Pure: the verdict, the confirmation runs and the price in, lines out; `objectives.serving_cost`
does the arithmetic. Without a price nothing here is called and no output changes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.outputs.commands import confirm_command
from app.outputs.format import fmt_cost_ratio, fmt_usd, fmt_value
from objectives import statistics as st
from objectives.capacity import SLO_CAPACITY_RPS
from objectives.serving_cost import (
    CapacityCost,
    CostInterval,
    capacity_cost,
    cost_ratio,
    output_tokens_per_request,
    usd_per_million,
)
from search.scenario import Scenario
from search.study.price import Price
from search.study.verdict import CandidateResult, Outcome, RunView, Verdict, candidate_results, runs_by_trial
from storage.tables import TrialStatus

DEFAULTS = "vllm_defaults"  # the baseline every cost is set against
OUTPUT_THROUGHPUT, REQUEST_THROUGHPUT = "output_throughput", "request_throughput"


@dataclass
class CostText:
    """`headline`: the deployed configuration's cost against the defaults', or why no cost is
    quoted (None: nothing is deployed); `title` and `lines`: every confirmed candidate's."""

    headline: str | None
    title: str = ""
    lines: list[str] = field(default_factory=list)


def price_words(price: Price) -> str:
    """`$3.5 an hour (the scenario's cost.usd_per_hour)`."""
    return f"${fmt_value(price.usd_per_hour)} an hour ({price.source})"


def _paced_by_the_server(scenario: Scenario) -> bool:
    """A closed loop: its throughput is what the server sustains, not a rate the workload offers."""
    return scenario.workload.arrival.mode == "closed"


def _throughput_cost(v: Verdict, runs: Sequence[RunView], price: Price) -> CostText:
    """The cost lines of a closed loop without a capacity search: each candidate priced at its
    confirmed output and request throughput (medians over its runs, with their intervals), its
    ratio to vLLM's defaults' the inverse of the throughput ratio; a candidate that missed its
    SLOs has no cost under them."""
    by_trial = runs_by_trial(runs)
    results = candidate_results(v, by_trial, [OUTPUT_THROUGHPUT, REQUEST_THROUGHPUT])
    defaults = next((c for c in v.candidates if c.baseline == DEFAULTS), None)

    def served(trial: int) -> list[float]:
        return [
            float(r.metrics.get(OUTPUT_THROUGHPUT, math.nan))
            for r in by_trial.get(trial, [])
            if r.status == TrialStatus.OK
        ]

    def body(c: CandidateResult) -> str:
        if not c.feasible:
            return "no cost under the SLOs: it missed them on its confirmed medians"
        per_token = usd_per_million(price.usd_per_hour, results[c.trial_number].metrics[OUTPUT_THROUGHPUT])
        if per_token is None:
            return "no cost: no output was measured"
        per_request = usd_per_million(price.usd_per_hour, results[c.trial_number].metrics[REQUEST_THROUGHPUT])
        text = f"{fmt_usd(per_token)} per million output tokens"
        if per_request is not None:
            text += f", {fmt_usd(per_request)} per million requests"
        if defaults is not None and defaults.trial_number != c.trial_number and defaults.feasible:
            ratio = cost_ratio(st.ratio(st.difference(served(c.trial_number), served(defaults.trial_number))))
            text += f"; {fmt_cost_ratio(ratio)} vLLM defaults' cost" if ratio is not None else ""
        return text

    said = price_words(price)
    bodies = {c.trial_number: body(c) for c in v.candidates}
    return _assembled(
        v, said, f"cost at the confirmed throughput (a closed loop: the server's own pace), at {said}", bodies
    )


def unquoted(price: Price, scenario: Scenario, study_name: str | None = None) -> str:
    """Why a study with a price quotes no cost: its scenario measures no capacity under the SLO
    (and is no closed loop, whose throughput would be one), or no complete confirmation has
    confirmed one yet."""
    if scenario.capacity is None and not _paced_by_the_server(scenario):
        return (
            f"cost at {price_words(price)}: none quoted: the scenario has no capacity: section, so no "
            f"capacity under the SLO to price (its open loop's throughput is the rate it offers)"
        )
    basis = "confirmed capacities under the SLO" if scenario.capacity is not None else "the confirmed throughput"
    return f"cost at {price_words(price)}: quoted from {basis}; {confirm_command(scenario, study_name)} confirms it"


def _assembled(v: Verdict, said: str, title: str, bodies: dict[int, str]) -> CostText:
    """The deployed configuration's cost as the headline, every candidate's under `title`."""
    lines = [f"{c.label}: {bodies[c.trial_number]}" for c in v.candidates]
    rec = v.recommended
    headline = f"cost at {said}: {rec.label}: {bodies[rec.trial_number]}" if rec is not None else None
    return CostText(headline, title, lines)


def _ratio(candidate: CandidateResult, reference: CandidateResult) -> CostInterval | None:
    """The candidate's cost over the reference's, from the capacity ratio the verdict would call
    (its runs' brackets against theirs), inverted."""
    diff = st.bracketed_difference(candidate.brackets[SLO_CAPACITY_RPS], reference.brackets[SLO_CAPACITY_RPS])
    return cost_ratio(
        st.ratio(diff),
        candidate_at_least=candidate.metrics[SLO_CAPACITY_RPS].at_least,
        reference_at_least=reference.metrics[SLO_CAPACITY_RPS].at_least,
    )


def _body(capacity: CandidateResult, cost: CapacityCost, defaults: CandidateResult | None) -> str:
    """`$0.412 [0.381, 0.447] per million output tokens, $49.4 [45.7, 53.6] per million requests;
    0.33x [0.28, 0.38] vLLM defaults' cost`, or why there is no cost."""
    interval = capacity.metrics[SLO_CAPACITY_RPS]
    if cost.per_million_requests is None:
        if interval.n == 0:
            return "no cost: every confirmation run failed, no capacity was measured"
        return "no cost: capacity 0, it met the SLOs at no rate tried"
    per_token = (
        f"{fmt_usd(cost.per_million_output_tokens)} per million output tokens"
        if cost.per_million_output_tokens is not None
        else "no cost per output token (no run stored its output at the capacity)"
    )
    text = f"{per_token}, {fmt_usd(cost.per_million_requests)} per million requests"
    if defaults is not None and defaults.trial_number != capacity.trial_number:
        ratio = _ratio(capacity, defaults)
        text += (
            f"; {fmt_cost_ratio(ratio)} vLLM defaults' cost"
            if ratio is not None
            else "; no ratio to vLLM defaults' cost (their capacity reached 0 in a run, or was not measured)"
        )
    return text


def cost_text(
    v: Verdict, scenario: Scenario, runs: Sequence[RunView], price: Price, study_name: str | None = None
) -> CostText:
    """The cost lines of a study with a price: the deployed configuration's in one line, and every
    confirmed candidate's, each at its confirmed capacity under the SLO."""
    if v.outcome == Outcome.INCOMPLETE or (scenario.capacity is None and not _paced_by_the_server(scenario)):
        return CostText(unquoted(price, scenario, study_name))
    if scenario.capacity is None:
        return _throughput_cost(v, runs, price)
    said = price_words(price)
    capacities = candidate_results(v, runs_by_trial(runs), [SLO_CAPACITY_RPS])
    # One figure for the study, not one per candidate: every candidate is sent the same requests
    # (same seed, outputs pinned by ignore_eos and max_tokens), so a per-candidate figure would
    # only add each run's drain tail and realized arrival rate to a cost ratio that is the
    # capacities' alone. Measured rather than read from the workload's length distributions,
    # which clipping, classes and traces leave without a closed-form mean; it is there wherever a
    # capacity is positive (the capacity search stores both), and where none is there is no
    # cost to quote.
    tokens = output_tokens_per_request(r.metrics for r in runs if r.status == TrialStatus.OK)
    defaults = next((capacities[c.trial_number] for c in v.candidates if c.baseline == DEFAULTS), None)
    bodies = {
        n: _body(cap, capacity_cost(price.usd_per_hour, cap.metrics[SLO_CAPACITY_RPS], tokens), defaults)
        for n, cap in capacities.items()
    }
    tokens_said = f", {fmt_value(tokens)} output tokens a request (measured at the capacity)" if tokens else ""
    return _assembled(v, said, f"cost at the confirmed capacity under the SLO, at {said}{tokens_said}", bodies)
