"""The rules per SLO: whether a stage has already lost an SLO, whatever its other requests do.

Each rule reads the requests known so far against one SLO's bound, for every stopping mode:
certainly lost (`lost`), the counts the likely rule predicts from (`chances`,
`objectives.likely_stop`) and the outcomes the decided rule counts (`outcomes`);
`objectives.early_abort` picks which of them stop a stage.

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
Means, ITL (pooled per chunk, so its count is not known in advance) and throughputs have no
certain early verdict and never abort a stage.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from loadgen import Abort, MetricName, RequestRecord
from objectives.likely_stop import Chances
from objectives.scoring import SLOSpec

__all__ = [
    "PERCENTILE_RULE_FAMILIES",
    "AbortRule",
    "ErrorRateRule",
    "PercentileRule",
    "rules_for",
    "violators_needed",
]

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
