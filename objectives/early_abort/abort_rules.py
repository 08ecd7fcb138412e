"""The certain rules: an SLO already lost, whatever the rest of the stage does (see the package)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from loadgen import Abort, MetricName, RequestRecord
from objectives.early_abort.likely import Chances
from objectives.scoring import SLOSpec

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
