"""The check a load run calls while a stage runs: the certain rules per SLO (`PercentileRule`,
`ErrorRateRule`, picked by `rules_for`), the decided rule, and `abort_check`, which runs the rules
of the stage's stopping mode (see the package)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from loadgen import Abort, AbortCheck, GaugeSample, MetricName, RequestRecord
from objectives.early_abort.likely import Chances, likely_verdict
from objectives.early_abort.saturation import over_saturated, queue_runaway
from objectives.scoring import SLOSpec
from objectives.slo_verdict import (
    DEFAULT_CONFIDENCE,
    VIOLATED,
    StageLength,
    counted_verdict,
    stage_passed,
    stop_reason,
)

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
        over = []
        for r in records:
            if self.class_name is not None and r.class_name != self.class_name:
                continue
            latency = _certain_latency_s(self.family, r, now)
            if latency is not None and latency > bound_s:
                over.append(latency)
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
        bound_s = self.bound_ms / 1000.0
        over = under = 0
        for r in records:
            if self.class_name is not None and r.class_name != self.class_name:
                continue
            latency = _certain_latency_s(self.family, r, now)
            if latency is None:
                continue
            if latency > bound_s:
                over += 1
            elif _final(self.family, r):
                under += 1
        return over, under

    @property
    def slo(self) -> str:
        return f"{self.metric}<={self.bound_ms:g}"

    @property
    def limit(self) -> float:
        return 1.0 - self.q

    def counts(self, records: Sequence[RequestRecord], now: float) -> tuple[int, int]:
        """(over, known) at `now`, as `slo_verdict.count_samples` counts a finished stage."""
        over, under = self.known(records, now)
        return over, over + under

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

    def counts(self, records: Sequence[RequestRecord], now: float) -> tuple[int, int]:
        failed = sum(1 for r in records if r.error_kind is not None and not r.aborted)
        succeeded = sum(1 for r in records if r.ok and not math.isnan(r.end_time))
        return failed, failed + succeeded

    def chances(self, records: Sequence[RequestRecord], now: float) -> Chances:
        failed = sum(1 for r in records if r.error_kind is not None and not r.aborted)
        succeeded = sum(1 for r in records if r.ok and not math.isnan(r.end_time))
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


DECIDED, LIKELY, CERTAIN, OFF = "decided", "likely", "certain", "off"
STOP_RULES = (DECIDED, LIKELY, CERTAIN, OFF)


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
        over, known = rule.counts(records, now)
        most = math.floor(known * length.scale(t))
        verdicts.append(counted_verdict(rule.slo, over, known, rule.limit, math.nan, confidence, length.looks, most))
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
    may_pass: bool = False,
    *,
    length: StageLength | None = None,
    first_offset: float = 0.0,
    confidence: float = DEFAULT_CONFIDENCE,
) -> AbortCheck:
    """One function for the load generator to call while a stage runs: the first reason to stop.

    `rule`: one of `STOP_RULES` (`off` is the caller's to honour by passing no check);
    `may_pass`: a likely pass may stop the stage too (capacity stages, with `likely`).
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
            rules, records, now, may_pass and len(rules) == len(slos)
        )

    return check
