"""What the confirmed verdict's numbers rest on, said beside it (`verdict_text.describe`):
values an early abort raised to a bound, capacities bracketed by their search, percentiles read
per run instead of pooled, the run-to-run noise, percentiles that too few requests decide, and
the search's screening against the confirmation, candidate by candidate.

Pure: a `search.study.verdict.Verdict` (with its scenario, the study's trial views and the
confirmation runs' metrics) in, lines out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from app.outputs.format import fmt_bracket, fmt_percent
from app.outputs.trial_views import TrialView
from loadgen import MetricName, class_key
from objectives import statistics as st
from objectives.agreement import Agreement, Call, CandidateAgreement, agreement
from objectives.capacity import CAPACITY_KEYS, SLO_CAPACITY_RPS, CapacityEstimate
from search.scenario import Scenario
from search.study.verdict import RunView, Verdict, candidate_results, measured_metrics, runs_by_trial


def bound_notes(v: Verdict, scenario: Scenario) -> list[str]:
    """What the verdict's numbers rest on where they are not plain measurements: values an early
    abort raised to a bound, capacities bracketed by their search, percentiles read per run."""
    lines = []
    for c in v.candidates:
        for m in measured_metrics(scenario):
            rounds = c.aborted_rounds(m)
            if rounds and m not in CAPACITY_KEYS:
                lines.append(
                    f"{c.label}: {m} in round {', '.join(map(str, rounds))} is only a lower bound (the "
                    f"target stage was aborted once its miss was certain): at least the value shown, "
                    f"entered as that bound" + ("; the median is a bound too" if c.metrics[m].at_least else "")
                )
        for m, brackets in c.brackets.items():
            if m == SLO_CAPACITY_RPS and brackets:
                runs = ", ".join(fmt_bracket(lo, hi) if math.isfinite(est) else "failed" for est, lo, hi in brackets)
                lines.append(
                    f"{c.label}: {m} run by run lies in {runs} req/s (met at the low end, violated at "
                    f"the high); its interval spans the runs' brackets"
                )
        if c.unpooled:
            lines.append(
                f"{c.label}: {', '.join(c.unpooled)} read as the median of its runs, not from their "
                f"pooled requests (its runs stored no per-request samples: stored before they were "
                f"kept, or measured without a `capacity:` section, whose single load run stores none)"
            )
    return lines


def noise_line(v: Verdict) -> str | None:
    noise = {m: cv for m, cv in v.noise.items() if math.isfinite(cv)}
    if not noise:
        return None
    runs = max((c.rounds for c in v.candidates), default=0)
    return f"run-to-run noise (CV over {runs} runs each): " + ", ".join(
        f"{m} {fmt_percent(cv)}" for m, cv in noise.items()
    )


def requests_of(metric: str, runs: Sequence[dict[str, Any]]) -> float:
    """The median number of completed requests a run had for `metric`'s class (NaN: unknown)."""
    key = class_key("completed", MetricName.parse(metric).cls)
    counts = [float(r[key]) for r in runs if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    return float(np.median(counts)) if counts else math.nan


def thin_percentiles(
    metrics: Sequence[str], runs: Sequence[dict[str, Any]], pooled_runs: dict[str, int] | None = None
) -> list[str]:
    """Warnings for the percentiles that the runs' requests (`runs`: their flat metrics) cannot pin
    down: per run, or over the requests of `pooled_runs[metric]` runs pooled."""
    pooled_runs = pooled_runs or {}
    found = (
        st.thin_percentile(m, requests_of(m, runs) * pooled_runs[m], f"pooled from {pooled_runs[m]} runs")
        if m in pooled_runs
        else st.thin_percentile(m, requests_of(m, runs))
        for m in metrics
    )
    return [w for w in found if w]


def pooled_runs(v: Verdict) -> dict[str, int]:
    """Per metric read from pooled requests by every candidate: the fewest runs any pool has."""
    out: dict[str, int] = {}
    for m in {m for c in v.candidates for m in c.requests}:
        if all(m in c.requests for c in v.candidates if c.rounds > len(c.failures)):
            out[m] = min(sum(1 for r in c.requests[m] if r is not None) for c in v.candidates if m in c.requests)
    return out


def _screened_capacity(cap: CapacityEstimate | None) -> tuple[float | None, float | None, float | None]:
    """A screened trial's capacity and its interval: the fit's where it has one, else the bracket."""
    if cap is None or not math.isfinite(cap.rps):
        return None, None, None
    if cap.fit_low is not None:
        return cap.rps, cap.fit_low, cap.fit_high if cap.fit_high is not None else math.inf
    return cap.rps, cap.low if cap.low is not None else 0.0, cap.high if cap.high is not None else math.inf


def screening_agreement(v: Verdict, views: Sequence[TrialView], runs: Sequence[RunView] = ()) -> Agreement:
    """Per confirmed candidate, the search's screening (its trial: feasible at the target, its
    capacity with its interval) beside the confirmation (its runs' verdict and capacity). The
    confirmed capacity is the verdict's where an objective is `slo_capacity_rps`, else read from
    `runs` as the verdict would (a scenario that maximizes the goodput at the capacity)."""
    by_number = {view.number: view for view in views}
    measured = (
        candidate_results(v, runs_by_trial(runs), [SLO_CAPACITY_RPS])
        if runs and any(SLO_CAPACITY_RPS not in c.metrics for c in v.candidates)
        else {}
    )
    rows = []
    for c in v.candidates:
        view = by_number.get(c.trial_number)
        if view is None:
            continue
        screened = None if view.category == "failed" else view.category == "feasible"
        confirmed = c.metrics.get(SLO_CAPACITY_RPS)
        if confirmed is None and c.trial_number in measured:
            read = measured[c.trial_number].metrics.get(SLO_CAPACITY_RPS)
            confirmed = read if read is not None and math.isfinite(read.value) else None
        rows.append(
            CandidateAgreement(
                c.label,
                Call(screened, *_screened_capacity(view.capacity)),
                Call(
                    None if c.failures else c.feasible,
                    *((confirmed.value, confirmed.low, confirmed.high) if confirmed is not None else ()),
                ),
            )
        )
    return agreement(rows)


def agreement_lines(a: Agreement) -> list[str]:
    """The screening against the confirmation, candidate by candidate, then the shares."""
    if not a.candidates:
        return []

    def feasible(call: Call) -> str:
        return "?" if call.feasible is None else ("feasible" if call.feasible else "infeasible")

    def capacity(call: Call) -> str:
        if call.capacity is None:
            return "no capacity"
        high = "inf" if call.high is None or math.isinf(call.high) else f"{call.high:.3g}"
        return f"{call.capacity:.3g} req/s [{call.low:.3g}, {high}]"

    lines = [
        f"{c.name}: screened {feasible(c.screen)}, {capacity(c.screen)}; confirmed {feasible(c.confirmed)}, "
        f"{capacity(c.confirmed)}" + ("" if c.feasibility_agrees in (True, None) else " (disagree)")
        for c in a.candidates
    ]
    return ["screening against confirmation, per confirmed candidate:", *lines, *a.lines()]
