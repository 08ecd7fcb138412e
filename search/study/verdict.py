"""What the confirmation phase's runs say: per candidate the median of its runs with an interval,
whether its medians meet the SLOs, how it compares with each baseline, and which configuration
to deploy. Pure: stored runs in, a `Verdict` out; outputs turn it into sentences.

The selection rule of the scenario is applied to the confirmed medians, with the baselines as
candidates like any other. A configuration is recommended over the best feasible baseline only
if it wins beyond the noise on some objective (its relative difference's 95% interval excludes
0, and the difference passes the metric's practical threshold, `verdict.practical`: 5% by
default) without losing on the rule's primary objective; otherwise the baseline is kept. A
difference whose whole interval lies within the threshold is "equal within 5%". Candidates
whose every objective is within the noise of the top one are its ties: the rule's tie-break
(the medians) decided between them, and the verdict says so. A candidate whose load client fell
behind its schedule in a run is ranked only when every feasible candidate's did.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

import numpy as np
from sqlalchemy.orm import Session

from loadgen import CLIENT_BEHIND, MetricName
from objectives import pooled
from objectives import statistics as st
from objectives.capacity import CAPACITY_KEYS, SLO_CAPACITY_RPS, TARGET_ABORTED
from objectives.practical import absolute_threshold
from objectives.scoring import NAN_VIOLATION, SERVER_OK, TARGET_COMPLETED
from objectives.stages import TARGET, StageResult
from search import pareto, trial_results
from search.scenario import Scenario
from storage import queries
from storage.tables import StudyRecord, TrialStatus


class RunView(Protocol):
    """A stored confirmation run as the verdict reads it (`storage.tables.ConfirmationRun`)."""

    trial_number: int
    baseline: str | None
    round: int
    status: str
    metrics: dict[str, Any]
    constraints: dict[str, Any]
    failure_class: str | None
    failure_line: str | None
    capacity: dict[str, Any] | None  # read through search.trial_results
    stages: list[Any]


PASS_FAIL = (SERVER_OK, TARGET_COMPLETED)


class Outcome(StrEnum):
    RECOMMEND = "recommend"  # a configuration beats the baselines beyond the noise
    KEEP_BASELINE = "keep_baseline"  # nothing does: deploy the (best feasible) baseline
    NONE_FEASIBLE = "none_feasible"  # no candidate met the SLOs on its confirmed medians
    INCOMPLETE = "incomplete"  # planned runs are missing (the phase was interrupted)


@dataclass
class CandidateResult:
    trial_number: int
    baseline: str | None
    rounds: int  # runs stored (ok or failed)
    metrics: dict[str, st.Interval]  # objectives and SLO metrics: median of the ok runs (pooled requests for
    # latency percentiles), 95% interval
    runs: dict[str, list[float]]  # the same metrics run by run, by round (NaN: failed run)
    constraints: dict[str, float]  # median over runs of each constraint (<= 0: met)
    failures: list[str] = field(default_factory=list)  # "round 2: startup_oom: ..."
    behind: list[int] = field(default_factory=list)  # rounds (1-based) whose load client fell behind its schedule
    rank: int | None = None  # by the selection rule among the feasible (0: first; None: unranked, or lagged)
    # per metric, by round: the run's value is only a lower bound (its target stage was aborted on it,
    # or a capacity search met the SLO at every rate it tried)
    censored: dict[str, list[bool]] = field(default_factory=dict)
    # capacity metrics, by round: (estimate, low, high), the true value between low and high
    brackets: dict[str, list[tuple[float, float, float]]] = field(default_factory=dict)
    # latency percentiles read from pooled requests, by round (None: the run failed)
    requests: dict[str, list[pooled.RunRequests | None]] = field(default_factory=dict)
    unpooled: list[str] = field(default_factory=list)  # percentiles read as the median of runs: no samples stored

    def aborted_rounds(self, metric: str) -> list[int]:
        """The rounds (1-based) whose value of `metric` is only a lower bound."""
        return [i + 1 for i, c in enumerate(self.censored.get(metric, [])) if c]

    @property
    def label(self) -> str:
        return f"{self.baseline} (trial {self.trial_number})" if self.baseline else f"trial {self.trial_number}"

    @property
    def feasible(self) -> bool:
        return not self.failures and bool(self.constraints) and all(v <= 0 for v in self.constraints.values())

    @property
    def worst_slo(self) -> tuple[str, float] | None:
        """The SLO its confirmed medians come closest to breaking, or break the most. The
        pass/fail constraints (server_ok, target_completed) count only when nothing else was
        scored: every candidate that missed the target stage misses target_completed alike."""
        graded = {k: v for k, v in self.constraints.items() if k not in PASS_FAIL} or self.constraints
        if not graded:
            return None
        key = max(graded, key=lambda k: graded[k])
        return key, graded[key]

    def values(self, names: Sequence[str]) -> list[float]:
        return [self.metrics[n].value for n in names]


@dataclass
class Comparison:
    """`candidate` against `reference`, per objective: the difference of the medians (relative or
    absolute: each `Difference` says)."""

    candidate: int
    reference: int
    diffs: dict[str, st.Difference]
    calls: dict[str, st.Call]
    thresholds: dict[str, float] = field(default_factory=dict)  # what a difference must pass to win (practical)

    def with_call(self, call: st.Call) -> list[str]:
        return [m for m, c in self.calls.items() if c == call]


@dataclass
class Verdict:
    outcome: Outcome
    candidates: list[CandidateResult]  # in the phase's order
    recommended: CandidateResult | None  # what to deploy (a baseline when KEEP_BASELINE)
    top: CandidateResult | None  # first by the selection rule on confirmed medians
    reference: CandidateResult | None  # the best feasible baseline
    comparisons: list[Comparison]  # every non-baseline candidate against every baseline
    ties: list[CandidateResult]  # feasible candidates within the noise of `top` on every objective
    noise: dict[str, float]  # pooled coefficient of variation per metric
    runs_planned: int
    runs_done: int
    closest: CandidateResult | None = None  # NONE_FEASIBLE: the smallest worst violation

    def comparison(self, candidate: int, reference: int) -> Comparison | None:
        return next((c for c in self.comparisons if c.candidate == candidate and c.reference == reference), None)

    @property
    def baselines(self) -> list[CandidateResult]:
        return [c for c in self.candidates if c.baseline]


def measured_metrics(scenario: Scenario) -> list[str]:
    """The metrics a verdict reports: the objectives, then the SLO metrics not among them."""
    names = list(scenario.objective_names)
    return names + [s.metric for s in scenario.slos if s.metric not in names]


def target_stage(run: RunView) -> StageResult | None:
    """The stored target stage of a run (its first), None when the run stored no stages."""
    stages = trial_results.stages_of(run)
    return next((st_ for st_ in stages if st_.kind == TARGET), stages[0] if stages else None)


def raised_metric(run: RunView) -> str | None:
    """The metric an early abort of the run's target stage raised to its certain lower bound
    (`objectives.stages.StageResult.raised`), whose value is then an "at least"."""
    stage = target_stage(run)
    if not run.metrics.get(TARGET_ABORTED) or stage is None:
        return None
    return stage.raised


def capacity_bracket(run: RunView, metric: str, value: float) -> tuple[tuple[float, float, float], bool]:
    """A capacity metric's run value with the bracket its search ended in, and whether it is only
    a lower bound (the SLO was met at every rate tried). The rate brackets `slo_capacity_rps`;
    the rate-proportional ones scale with it (`capacity.at_capacity`)."""
    cap = trial_results.capacity_of(run)
    if cap is None or not math.isfinite(cap.rps) or not math.isfinite(value):
        return (value, value, value), False
    low_rate = cap.low if cap.low is not None else 0.0
    high_rate = cap.high if cap.high is not None else cap.rps
    if metric == SLO_CAPACITY_RPS:
        return (value, low_rate, high_rate), cap.censored
    if cap.rps > 0:
        return (value, value * low_rate / cap.rps, value * high_rate / cap.rps), cap.censored
    return (value, value, value), cap.censored


def _samples(run: RunView) -> tuple[dict[str, Any] | None, float | None]:
    stage = target_stage(run)
    if stage is None or stage.samples is None:
        return None, None
    return stage.samples, stage.elapsed_s


def pooled_quantile(metric: str) -> float | None:
    """The quantile `metric` reads from pooled requests (`pooled.pooled_metric`); None for a
    metric that pooled requests do not give."""
    q = MetricName.parse(metric).quantile
    return q if pooled.pooled_metric(metric) else None


def candidate_result(trial_number: int, runs: Sequence[RunView], metrics: Sequence[str]) -> CandidateResult:
    runs = sorted(runs, key=lambda r: r.round)
    ok = [r.status == TrialStatus.OK for r in runs]
    by_metric = {
        m: [float(r.metrics.get(m, math.nan)) if good else math.nan for r, good in zip(runs, ok)] for m in metrics
    }
    raised = [raised_metric(r) if good else None for r, good in zip(runs, ok)]
    censored = {m: [name == m for name in raised] for m in metrics}
    brackets = {}
    for m in (m for m in metrics if m in CAPACITY_KEYS):
        pairs = [capacity_bracket(r, m, v) for r, v in zip(runs, by_metric[m])]
        brackets[m] = [b for b, _ in pairs]
        censored[m] = [c or was for (_, c), was in zip(pairs, censored[m])]
    samples = [_samples(r) if good else (None, None) for r, good in zip(runs, ok)]
    served = [s for s, good in zip(samples, ok) if good]
    requests, unpooled = {}, []
    for m in (m for m in metrics if pooled.pooled_metric(m)):
        if served and all(s is not None for s, _ in served):
            requests[m] = [pooled.run_requests(s, m, elapsed) if s is not None else None for s, elapsed in samples]
        elif served:
            unpooled.append(m)
    intervals = {}
    for m, values in by_metric.items():
        if m in requests and (q := pooled_quantile(m)) is not None:
            intervals[m] = pooled.pooled_percentile([r for r in requests[m] if r is not None], q)
        elif m in brackets:
            intervals[m] = bracketed_median(brackets[m], censored[m])
        else:
            intervals[m] = st.median_interval(values, censored[m])
    keys = {k for r in runs for k in r.constraints}
    # A bound's violation is linear in its metric, so the median violation is the median's.
    constraints = {
        k: float(np.median([float(r.constraints[k]) for r in runs if k in r.constraints])) for k in sorted(keys)
    }
    constraints.update(pooled_constraints(constraints, intervals, requests))
    failures = [
        f"round {r.round + 1}: {r.failure_class}: {(r.failure_line or '')[:160]}"
        for r, good in zip(runs, ok)
        if not good
    ]
    behind = [r.round + 1 for r, good in zip(runs, ok) if good and r.metrics.get(CLIENT_BEHIND)]
    return CandidateResult(
        trial_number=trial_number,
        baseline=runs[0].baseline if runs else None,
        rounds=len(runs),
        metrics=intervals,
        runs=by_metric,
        constraints=constraints,
        failures=failures,
        behind=behind,
        censored=censored,
        brackets=brackets,
        requests=requests,
        unpooled=unpooled,
    )


def runs_by_trial(runs: Iterable[RunView]) -> dict[int, list[RunView]]:
    by_trial: dict[int, list[RunView]] = {}
    for r in runs:
        by_trial.setdefault(r.trial_number, []).append(r)
    return by_trial


def candidate_results(v: Verdict, by_trial: dict[int, list[RunView]], metrics: list[str]) -> dict[int, CandidateResult]:
    """Each candidate's `metrics` with their intervals (and a capacity's runs' brackets), read as
    the verdict reads an objective's (the same function on the same runs: where a metric is an
    objective, the same numbers), whether or not the scenario made it one."""
    return {
        c.trial_number: candidate_result(c.trial_number, by_trial.get(c.trial_number, []), metrics)
        for c in v.candidates
    }


def pooled_constraints(
    constraints: dict[str, float], intervals: dict[str, st.Interval], requests: dict[str, Any]
) -> dict[str, float]:
    """The SLO constraints on percentiles read from pooled requests, held to the pooled value
    (the key states the bound as resolved: `ttft_p95_ms@short<=1101`; `SLOSpec.violation`).
    A pooled value that failed requests reach (NaN from served runs) violates its bound, as a
    run's NaN does."""
    out = {}
    for key in constraints:
        for op in ("<=", ">="):
            metric, _, bound = key.partition(op)
            if bound and metric in requests and intervals[metric].n > 0:
                b, value = float(bound), intervals[metric].value
                if math.isnan(value):
                    out[key] = NAN_VIOLATION
                elif b != 0:
                    out[key] = (value - b) / abs(b) if op == "<=" else (b - value) / abs(b)
                break
    return out


def bracketed_median(brackets: Sequence[tuple[float, float, float]], censored: Sequence[bool]) -> st.Interval:
    """The median of the runs' estimates, its interval from the bootstrap low of the runs' low
    ends to the bootstrap high of their high ends: never narrower than the brackets."""
    point = st.median_interval([b[0] for b in brackets], censored)
    if point.n == 0:
        return point
    lows = st.median_interval([b[1] for b in brackets if math.isfinite(b[0])])
    highs = st.median_interval([b[2] for b in brackets if math.isfinite(b[0])])
    return st.Interval(point.value, min(lows.low, point.low), max(highs.high, point.high), point.n, point.at_least)


def compare(candidate: CandidateResult, reference: CandidateResult, scenario: Scenario) -> Comparison:
    """Each objective's difference with its bootstrap interval: from pooled requests where both
    sides stored them (resampling rounds, then requests), across the runs' brackets for
    capacities, of the runs' values otherwise (each side resampled on its own, as before)."""
    diffs, calls, thresholds = {}, {}, {}
    for objective in scenario.objectives:  # its direction typed as `statistics.call` takes it
        name, direction = objective.metric, objective.direction
        if name in candidate.requests and name in reference.requests and (q := pooled_quantile(name)) is not None:
            diff = pooled.pooled_difference(candidate.requests[name], reference.requests[name], q)
        elif name in candidate.brackets and name in reference.brackets:
            diff = st.bracketed_difference(candidate.brackets[name], reference.brackets[name])
        else:
            diff = st.difference(candidate.runs[name], reference.runs[name])
        relative = not isinstance(diff, st.Difference) or diff.kind == "relative"
        thresholds[name] = scenario.verdict.practical.threshold(name) if relative else absolute_threshold(name)
        diffs[name], calls[name] = diff, st.call(diff, direction, thresholds[name])
    return Comparison(candidate.trial_number, reference.trial_number, diffs, calls, thresholds)


def _primary(scenario: Scenario) -> list[str]:
    """The objectives a recommended configuration must not lose on: the rule's metric (best_of),
    every objective (knee: no single one leads)."""
    sel = scenario.selection
    return [sel.metric] if sel.rule == "best_of" and sel.metric else list(scenario.objective_names)


def decide(runs: Iterable[RunView], scenario: Scenario, order: Sequence[int], runs_per_candidate: int) -> Verdict:
    """The verdict over the confirmation runs of the candidates `order` (trial numbers, in the
    phase's order), each planned `runs_per_candidate` times."""
    metrics = measured_metrics(scenario)
    by_trial: dict[int, list[RunView]] = {n: [] for n in order}
    for r in runs:
        if r.trial_number in by_trial:
            by_trial[r.trial_number].append(r)
    candidates = [candidate_result(n, by_trial[n], metrics) for n in order if by_trial[n]]
    names, directions = scenario.objective_names, scenario.directions
    noise = {m: st.pooled_cv([[v for v in c.runs[m] if math.isfinite(v)] for c in candidates]) for m in metrics}
    done = sum(c.rounds for c in candidates)
    planned = len(order) * runs_per_candidate
    baselines = [c for c in candidates if c.baseline]
    comparisons = [compare(c, b, scenario) for c in candidates if not c.baseline for b in baselines]
    verdict = Verdict(Outcome.INCOMPLETE, candidates, None, None, None, comparisons, [], noise, planned, done)
    if done < planned:
        return verdict

    feasible = [c for c in candidates if c.feasible]
    if not feasible:
        verdict.outcome = Outcome.NONE_FEASIBLE
        served = [c for c in candidates if not c.failures] or candidates
        verdict.closest = min(served, key=lambda c: c.worst_slo[1] if c.worst_slo else math.inf, default=None)
        return verdict
    # A run whose load client fell behind offered the server less load than planned, so its
    # medians flatter it: such a candidate is ranked only when every feasible one had such a run.
    trusted = [c for c in feasible if not c.behind] or feasible
    ranking = pareto.rank([c.values(names) for c in trusted], directions, names, scenario.selection)
    for position, i in enumerate(ranking):
        trusted[i].rank = position
    ordered = [trusted[i] for i in ranking]
    top = ordered[0]
    verdict.top = top
    verdict.reference = next((c for c in ordered if c.baseline), None)
    verdict.ties = [
        c for c in ordered[1:] if all(call in ("tie", "equal") for call in compare(c, top, scenario).calls.values())
    ]
    if top.baseline or verdict.reference is None:
        verdict.outcome = Outcome.KEEP_BASELINE if top.baseline else Outcome.RECOMMEND
        verdict.recommended = top
        return verdict
    against = compare(top, verdict.reference, scenario)
    loses_where_it_counts = any(against.calls[m] == "loss" for m in _primary(scenario))
    if against.with_call("win") and not loses_where_it_counts:
        verdict.outcome, verdict.recommended = Outcome.RECOMMEND, top
    else:
        verdict.outcome, verdict.recommended = Outcome.KEEP_BASELINE, verdict.reference
    return verdict


def stored_verdict(session: Session, rec: StudyRecord, scenario: Scenario) -> Verdict | None:
    """The verdict of the study's confirmation phase as stored (None: the phase never started);
    INCOMPLETE while planned runs are missing."""
    plan = rec.confirmation
    if not plan:
        return None
    return decide(queries.confirmation_runs(session, rec), scenario, plan["candidates"], plan["runs"])
