"""Stop a load stage as soon as its SLO verdict is certain.

Pure: a rule looks at the requests sent so far and says whether the stage has already lost.

* A percentile bound (`ttft_p95_ms@short <= B`) is lost once enough of the stage's planned
  requests are already above B that the percentile must exceed B however the rest turn out:
  with numpy's linear percentile over N values, the q-quantile exceeds B once
  N - floor((N - 1) q) of them do (for p95, more than 5 % of N). Fewer successful requests
  than planned only lowers that count, so counting against the planned N is safe.
  A request still in flight counts as soon as its latency is certain to exceed B: TTFT and
  E2EL once that long has passed since it was sent, TPOT once the time since its first token
  over its remaining decode steps does (`max_tokens` is exact: the client sets `ignore_eos`).
  Such a request is assumed to finish; one that later fails is one the error rate counts.
  A request that failed (or was never answered) is over every bound: it has no latency, and
  the stage's percentile counts it above all it measured (`loadgen.metrics`).
* An error-rate bound is lost once more requests have failed than it allows of the plan.
* The server's waiting queue growing without bound (`objectives.saturation.queue_runaway`: an
  open loop above capacity never reaches a steady state; a burst's queue drains, this one does not).
Means, ITL (pooled per chunk, so its count is not known in advance) and throughputs have no
certain early verdict and never abort a stage.

Four ways to run a stage (`STOP_RULES`, the scenario's `capacity.early_abort`):

* `certain`: the rules above only.
* `likely`: the rules above, then a stage also stops once a verdict is at least
  `LIKELY` (95 %) probable given what is measured so far. Per SLO, each planned request is over
  its bound (a failure, for the error rate) with an unknown probability p, the same for every
  request of the stage (exchangeable); p has a Jeffreys Beta(1/2, 1/2) prior, updated by the
  requests whose outcome is known (finished, or in flight and already certain to exceed the
  bound, as above). The requests still unknown (in flight, failed, not yet sent) follow the
  Beta-binomial predictive, which gives P(miss) = P(known over + future over >= the count
  that makes the percentile exceed the bound). A request in flight is censored: counted as
  over once it certainly is, otherwise drawn like one not yet sent (which only understates a
  miss). Any SLO with P(miss) >= 95 % stops the stage as a likely miss. A capacity stage
  (never the target stage, whose metrics are the objectives) also stops as a likely pass once
  at least half its planned requests are known and P(some SLO missed) <= 5 % (the sum of the
  SLOs' miss probabilities, Boole's inequality), if every SLO it is held to has a rule here.
  When the percentile sits between two values, the undecided count is taken as a miss for a
  pass and as a pass for a miss: both stops lean to the full stage's verdict.
  And over-saturation, its own reason (`objectives.saturation.over_saturated`): the waiting queue
  and the TTFT of the requests sent over the last window both climbing, beyond a burst's: the
  rate is above capacity and the stage is measuring its own backlog (as GuideLLM's
  over-saturation stop reads it).
* `decided` (the default): the certain rules, queue runaway and over-saturation as above (the
  certain percentile rule on a target stage only: a capacity stage's counts enter the capacity
  fit, and that rule's cut falls on a run of requests over the bound), and
  the stage's verdict (`objectives.slo_verdict`): at each of the stage's looks
  (`slo_verdict.StageLength`: every slice of its length), each counted SLO is a Clopper-Pearson
  decision on the share of its requests over the bound (failed requests over, requests in
  flight once certainly over; in runs, counted as fewer, `objectives.design_effect`), at the
  scenario's confidence with Bonferroni's correction over the looks. A decided violation stops the stage at any look (a miss, its requests in flight
  cut short); from the nominal length on, a look where no SLO is left undecided that the cap
  could still decide stops the sending and lets the requests in flight finish (`Abort.drain`:
  the stage is the one planned to end there, not a cut one). A stage planned to its cap runs on
  while an SLO is undecided. It replaces `likely` as the default: where the likely rule
  predicts the full stage's verdict from its first part (and stops a capacity stage as a
  likely pass at half its length), this one states a decision about the proportion with a
  stated error rate, never calls a pass before the nominal length, and lengthens a stage
  that cannot tell instead of guessing.
* `off`: nothing stops a stage.

Latencies drift within a stage near capacity (the queue builds), which exchangeability ignores:
that makes a likely miss late rather than wrong, and is why a likely pass waits for half the
stage and yields to over-saturation. `tests/unit/objectives/test_stopping_rules.py`
measures the wrong-stop rate on simulated stages; `benchmarks/bench_stopping.py` on stored ones.

Here, in that order: queue runaway and over-saturation, the likely rule's Beta-binomial
prediction, the certain rules per SLO (`PercentileRule`, `ErrorRateRule`, picked by `rules_for`),
the decided rule, `abort_check` (the check a load run calls, running the rules of the stage's
stopping mode), and a recorded stage asked again (`replay`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from scipy import stats

from loadgen import Abort, AbortCheck, GaugeSample, MetricName, RequestRecord
from objectives.design_effect import OverCount
from objectives.saturation import over_saturated, queue_runaway
from objectives.scoring import SLOSpec
from objectives.slo_verdict import (
    DEFAULT_CONFIDENCE,
    VIOLATED,
    StageLength,
    counted_verdict,
    stage_passed,
    stop_reason,
)

__all__ = [
    "CERTAIN",
    "DECIDED",
    "LIKELY",
    "LIKELY_P",
    "OFF",
    "PASS_MIN_KNOWN",
    "PERCENTILE_RULE_FAMILIES",
    "PRIOR",
    "STOP_RULES",
    "Abort",
    "AbortRule",
    "Chances",
    "ErrorRateRule",
    "PercentileRule",
    "abort_check",
    "decided_verdict",
    "likely_verdict",
    "replay",
    "rules_for",
    "seen_at",
    "violators_needed",
    "waiting_proxy",
]

# The four ways to run a stage (the module docstring; the scenario's `capacity.early_abort`).
DECIDED, LIKELY, CERTAIN, OFF = "decided", "likely", "certain", "off"
STOP_RULES = (DECIDED, LIKELY, CERTAIN, OFF)


# --- the likely rule: a stage's verdict predicted from what it has measured -----------------------

LIKELY_P = 0.95  # a likely verdict is at least this probable
PRIOR = (0.5, 0.5)  # Jeffreys prior on the share of requests over the bound
PASS_MIN_KNOWN = 0.5  # a likely pass waits until this share of the planned requests is known


def _at_least(k: int, n: int, a: float, b: float) -> float:
    """P(X >= k) for X ~ Beta-binomial(n, a, b)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    return float(stats.betabinom.sf(k - 1, n, a, b))


@dataclass(frozen=True)
class Chances:
    """One SLO's verdict as a probability: of the planned requests, `over` are known to be over
    the bound (failed, for the error rate), `under` known within it, the rest unknown."""

    metric: str
    event: str  # what P(miss) is the probability of, for the stage row
    planned: int
    over: int
    under: int
    miss: float  # P(at least the count that misses the SLO)
    passing: float  # P(at most the count that certainly meets it)

    @classmethod
    def of(cls, metric: str, event: str, planned: int, over: int, under: int, miss_at: int, pass_max: int) -> Chances:
        unknown = max(0, planned - over - under)
        a, b = PRIOR[0] + over, PRIOR[1] + under
        miss = _at_least(miss_at - over, unknown, a, b)
        passing = 1.0 - _at_least(pass_max + 1 - over, unknown, a, b)
        return cls(metric, event, planned, over, under, miss, passing)

    @property
    def known(self) -> int:
        return self.over + self.under


class ChanceRule(Protocol):
    def chances(self, records: Sequence[RequestRecord], now: float) -> Chances: ...


def likely_verdict(
    rules: Sequence[ChanceRule], records: Sequence[RequestRecord], now: float, may_pass: bool
) -> Abort | None:
    """A likely miss of any rule's SLO, or (with `may_pass`) a likely pass of every one of them
    (see the module docstring)."""
    chances = [rule.chances(records, now) for rule in rules]
    for c in chances:
        if c.miss >= LIKELY_P:
            return Abort(
                f"likely miss: {c.event} = {c.miss:.2f} after {c.known} of {c.planned} requests", math.nan, None
            )
    if not may_pass or not chances:
        return None
    if any(c.known < PASS_MIN_KNOWN * c.planned for c in chances):
        return None
    any_miss = min(1.0, sum(1.0 - c.passing for c in chances))
    if any_miss <= 1.0 - LIKELY_P:
        known = min(chances, key=lambda c: c.known)
        return Abort(
            f"likely pass: P(every SLO met) = {1.0 - any_miss:.2f} after {known.known} of {known.planned} requests",
            math.nan,
            None,
            passed=True,
        )
    return None


# --- the certain rules per SLO, the decided rule, and the check a load run calls ------------------

PERCENTILE_RULE_FAMILIES = ("ttft", "tpot", "e2el")  # whose certain bound a request in flight gives


class AbortRule(Protocol):
    def lost(self, records: Sequence[RequestRecord], now: float) -> Abort | None:
        """Whether the stage has certainly violated this SLO by `now`."""
        ...

    def chances(self, records: Sequence[RequestRecord], now: float) -> Chances:
        """This SLO's miss and pass as probabilities at `now` (the likely rule)."""
        ...


def violators_needed(planned: int, q: float) -> int:
    """How many of `planned` values above a bound make their q-quantile (numpy's linear
    interpolation) exceed it whatever the others are."""
    return planned - math.floor((planned - 1) * q)


def _final(family: str, r: RequestRecord) -> bool:
    """The request's latency of this family will not change any more."""
    if family == "ttft":
        return bool(r.chunk_times)
    return not math.isnan(r.end_time) or len(r.chunk_times) >= r.expected_output_tokens


def _certain_latency_s(family: str, r: RequestRecord, now: float) -> float | None:
    """A lower bound on the request's final latency (s) as far as it is known at `now`; inf for
    a failed request (above every bound, with no value)."""
    if r.failed:
        return math.inf
    if math.isnan(r.send_time) or r.error_kind is not None:
        return None
    # Every token in (only usage or [DONE] to come): the latencies are final already.
    done = not math.isnan(r.end_time) or len(r.chunk_times) >= r.expected_output_tokens
    if family == "ttft":
        return r.chunk_times[0] - r.send_time if r.chunk_times else (None if done else now - r.send_time)
    if family == "e2el":
        if done:
            return r.chunk_times[-1] - r.send_time if r.chunk_times else None
        return now - r.send_time
    # tpot: (last - first) / (n - 1); in flight, the last token is still to come
    n = r.output_tokens if done else r.expected_output_tokens
    if not r.chunk_times or n <= 1:
        return None
    last = r.chunk_times[-1] if done else now
    return (last - r.chunk_times[0]) / (n - 1)


@dataclass(frozen=True)
class PercentileRule:
    metric: str
    family: str  # ttft | tpot | e2el
    q: float  # 0-1
    class_name: str | None
    bound_ms: float
    planned: int  # the stage's planned requests of this class

    def lost(self, records: Sequence[RequestRecord], now: float) -> Abort | None:
        need = violators_needed(self.planned, self.q)
        bound_s = self.bound_ms / 1000.0
        over = [latency for _, latency in self._certain(records, now) if latency > bound_s]
        if len(over) < need:
            return None
        # At least `need` final values are >= the need-th largest lower bound: so is the quantile.
        # Failed requests (inf) have no value: among the need, the percentile is unknown (NaN).
        least = sorted(over, reverse=True)[need - 1] * 1000.0
        if math.isinf(least):
            least = math.nan
        failed = sum(1 for v in over if math.isinf(v))
        return Abort(
            f"{self.metric} > {self.bound_ms:.4g} ms is certain: {len(over)} of "
            f"{self.planned} planned requests already over it" + (f" ({failed} failed)" if failed else ""),
            (least - self.bound_ms) / self.bound_ms,
            self.metric,
            least,
        )

    def known(self, records: Sequence[RequestRecord], now: float) -> tuple[int, int]:
        """(requests certainly over the bound, requests final and within it) at `now`."""
        outcomes = self.outcomes(records, now)
        over = sum(outcomes)
        return over, len(outcomes) - over

    @property
    def slo(self) -> str:
        return f"{self.metric}<={self.bound_ms:g}"

    @property
    def limit(self) -> float:
        return 1.0 - self.q

    def outcomes(self, records: Sequence[RequestRecord], now: float) -> list[bool]:
        """Whether each request known at `now` is over the bound, in send order, as
        `slo_verdict.sample_outcomes` reads a finished stage."""
        bound_s = self.bound_ms / 1000.0
        return [
            latency > bound_s
            for r, latency in self._certain(records, now)
            if latency > bound_s or _final(self.family, r)
        ]

    def _certain(self, records: Sequence[RequestRecord], now: float) -> Iterator[tuple[RequestRecord, float]]:
        """This class's requests whose latency is known at `now`, at least (in send order)."""
        for r in records:
            if self.class_name is None or r.class_name == self.class_name:
                latency = _certain_latency_s(self.family, r, now)
                if latency is not None:
                    yield r, latency

    def chances(self, records: Sequence[RequestRecord], now: float) -> Chances:
        over, under = self.known(records, now)
        need = violators_needed(self.planned, self.q)
        # (N - 1) q between two ranks: need - 1 values over may or may not exceed the bound
        pass_max = need - 1 if ((self.planned - 1) * self.q).is_integer() else need - 2
        return Chances.of(
            self.metric, f"P({self.metric} > {self.bound_ms:.4g} ms)", self.planned, over, under, need, pass_max
        )


@dataclass(frozen=True)
class ErrorRateRule:
    bound: float
    planned: int

    def lost(self, records: Sequence[RequestRecord], now: float) -> Abort | None:
        allowed = math.floor(self.bound * self.planned)
        failed = sum(1 for r in records if r.error_kind is not None and not r.aborted)
        if failed <= allowed:
            return None
        margin = (failed / self.planned - self.bound) / self.bound if self.bound > 0 else math.nan
        return Abort(
            f"error_rate > {self.bound:g} is certain: {failed} of {self.planned} planned requests failed",
            margin,
            "error_rate",
            failed / self.planned,
        )

    @property
    def slo(self) -> str:
        return f"error_rate<={self.bound:g}"

    @property
    def limit(self) -> float:
        return self.bound

    def outcomes(self, records: Sequence[RequestRecord], now: float) -> list[bool]:
        """Whether each request known to have failed or succeeded failed, in send order."""
        return [
            r.error_kind is not None
            for r in records
            if (r.error_kind is not None and not r.aborted) or (r.ok and not math.isnan(r.end_time))
        ]

    def chances(self, records: Sequence[RequestRecord], now: float) -> Chances:
        outcomes = self.outcomes(records, now)
        failed = sum(outcomes)
        succeeded = len(outcomes) - failed
        allowed = math.floor(self.bound * self.planned)
        return Chances.of(
            "error_rate", f"P(error_rate > {self.bound:g})", self.planned, failed, succeeded, allowed + 1, allowed
        )


def rules_for(slos: Sequence[SLOSpec], planned_by_class: dict[str, int]) -> list[AbortRule]:
    """The SLOs that can be decided early, as rules over a stage with this many planned requests."""
    total = sum(planned_by_class.values())
    rules: list[AbortRule] = []
    for slo in slos:
        if slo.max is None:
            continue
        if slo.metric == "error_rate":
            rules.append(ErrorRateRule(slo.max, total))
            continue
        name = MetricName.parse(slo.metric)
        family, q, cls = name.family, name.quantile, name.cls
        if family not in PERCENTILE_RULE_FAMILIES or q is None:
            continue
        planned = planned_by_class.get(cls, 0) if cls else total
        if planned > 0 and 0 < q < 1:
            rules.append(PercentileRule(slo.metric, family, q, cls, slo.max, planned))
    return rules


def decided_verdict(
    rules: Sequence[PercentileRule | ErrorRateRule],
    records: Sequence[RequestRecord],
    now: float,
    t: float,
    length: StageLength,
    confidence: float,
) -> Abort | None:
    """The `decided` rule at a look `t` seconds into the stage (see the module docstring)."""
    verdicts = []
    for rule in rules:
        count = OverCount.of(rule.outcomes(records, now))
        most = math.floor(count.known * length.scale(t))
        verdicts.append(counted_verdict(rule.slo, count, rule.limit, math.nan, confidence, length.looks, most))
    reason = stop_reason(verdicts, t, length)
    if reason is None or t >= length.cap_s - 1e-9:  # at the cap the schedule ends by itself
        return None
    if any(v.verdict == VIOLATED and v.basis == "interval" for v in verdicts):
        return Abort(reason)
    ran_on = f" (ran on past its {length.nominal_s:.0f} s while undecided)" if t > length.nominal_s + 1e-9 else ""
    decided = "; ".join(v.text() for v in verdicts) or "no SLO with a count"
    return Abort(f"decided after {t:.0f} s{ran_on}: {decided}", passed=stage_passed(verdicts), drain=True)


def abort_check(
    slos: Sequence[SLOSpec],
    rate: float,
    rule: str = CERTAIN,
    capacity_stage: bool = False,
    *,
    length: StageLength | None = None,
    first_offset: float = 0.0,
    confidence: float = DEFAULT_CONFIDENCE,
) -> AbortCheck:
    """One function for the load generator to call while a stage runs: the first reason to stop.

    `rule`: one of `STOP_RULES` (`off` is the caller's to honour by passing no check);
    `capacity_stage`: a likely pass may stop the stage too (with `likely`); under `decided`, a
    percentile that is certainly over its bound in the planned sample does not cut it, only its
    decided verdicts do. Its counts enter the capacity fit, and requests over a bound come in
    runs: a stage cut on the run that made its sample's percentile certain leaves the fit the
    share of a burst (docs/results.md, "Clustered exceedances"). A target stage keeps that cut:
    a miss there stops the screened trial, and the confirmation measures its candidates in full.
    `length` (`decided`): the stage's nominal length, cap and looks, `first_offset` its first
    request's due time from its start (s), `confidence` its verdicts'.
    It is handed every planned record (sent or not), so the plan's size per class, which the
    percentile rules count against, is read from the records on the first call."""
    if rule not in (DECIDED, LIKELY, CERTAIN):
        raise ValueError(f"rule must be {DECIDED!r}, {LIKELY!r} or {CERTAIN!r}, not {rule!r}")
    if rule == DECIDED and length is None:
        raise ValueError("the decided rule needs the stage's length")
    rules: list[AbortRule] | None = None
    looks = iter(length.checkpoints() if length is not None else ())
    look = next(looks, math.inf)

    def check(records: Sequence[RequestRecord], now: float, samples: Sequence[GaugeSample]) -> Abort | None:
        nonlocal rules, look
        if rules is None:
            rules = rules_for(slos, dict(Counter(r.class_name for r in records)))
        for r in rules:
            if capacity_stage and rule == DECIDED and isinstance(r, PercentileRule):
                continue
            verdict = r.lost(records, now)
            if verdict is not None:
                return verdict
        verdict = queue_runaway(samples, rate, now)
        if verdict is not None or rule == CERTAIN:
            return verdict
        if rule == DECIDED and length is not None:
            started = records[0].scheduled_time - first_offset if records else math.nan
            t = now - started
            if not t >= look:  # NaN (nothing sent yet) or before the next look
                return over_saturated(samples, records, now, rate)
            while look <= t:
                look = next(looks, math.inf)
            counted = [r for r in rules if isinstance(r, (PercentileRule, ErrorRateRule))]
            return over_saturated(samples, records, now, rate) or decided_verdict(
                counted, records, now, t, length, confidence
            )
        # a likely pass only where every SLO the stage is held to has a rule that can tell
        return over_saturated(samples, records, now, rate) or likely_verdict(
            rules, records, now, capacity_stage and len(rules) == len(slos)
        )

    return check


# --- a recorded stage asked again: its requests as a load run saw them at each moment -------------


def seen_at(records: Sequence[RequestRecord], now: float) -> list[RequestRecord]:
    """The records as the load run saw them at `now`: not yet sent, in flight with the chunks
    received so far, or finished (times are the records' own, compared with `now`)."""
    out = []
    for r in records:
        v = RequestRecord(
            r.index, r.class_name, r.scheduled_time, r.expected_prompt_tokens, r.expected_output_tokens, warmup=r.warmup
        )
        if r.send_time <= now:
            v.send_time = r.send_time
            v.chunk_times = [t for t in r.chunk_times if t <= now]
            v.first_token_time = v.chunk_times[0] if v.chunk_times else None
            if r.end_time <= now:
                v.end_time, v.status = r.end_time, r.status
                v.completion_tokens, v.prompt_tokens = r.completion_tokens, r.prompt_tokens
                v.error_kind, v.error_text = r.error_kind, r.error_text
        out.append(v)
    return out


def waiting_proxy(records: Sequence[RequestRecord], end: float, period_s: float = 1.0) -> list[GaugeSample]:
    """A stand-in for the server's waiting queue where its gauges were not kept: once every
    `period_s`, the requests sent and still without their first token (queued, or in prefill)."""
    out = []
    t = period_s
    while t <= end:
        waiting = sum(
            1
            for r in records
            if r.send_time <= t and not (r.chunk_times and r.chunk_times[0] <= t) and not r.end_time <= t
        )
        out.append(GaugeSample(t, math.nan, float(waiting), math.nan))
        t += period_s
    return out


def replay(
    check: AbortCheck,
    records: Sequence[RequestRecord],
    end: float,
    gauges: Sequence[GaugeSample] = (),
    period_s: float = 0.5,
) -> tuple[float, Abort] | None:
    """(when, why) `check` would have stopped a stage with these (final) records, asked every
    `period_s` as the load run asks it, or None if it ran to `end`. `records`: every planned
    request, times from the stage's start; a request is known as far as it had come by then."""
    now = period_s
    while now < end:
        verdict = check(seen_at(records, now), now, [g for g in gauges if g.t <= now])
        if verdict is not None:
            return now, verdict
        now += period_s
    return None
