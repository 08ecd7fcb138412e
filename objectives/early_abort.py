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
* An error-rate bound is lost once more requests have failed than it allows of the plan.
* The server's waiting queue growing without bound (an open loop above capacity never reaches a
  steady state, statistics.md): over the last `QUEUE_WINDOW_S`, the least-squares slope of
  `vllm:num_requests_waiting` is at least `QUEUE_GROWTH_SHARE` of the offered rate and the
  queue holds more than half the window's arrivals, and at least `QUEUE_MIN_DEPTH` requests (a
  burst's queue drains; this one does not. Measured: gamma bursts at 0.74 req/s queued 5
  requests within 9 s).
Means, ITL (pooled per chunk, so its count is not known in advance) and throughputs have no
certain early verdict and never abort a stage.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from objectives.load import Abort, AbortCheck
from objectives.load import RequestRecord
from objectives.scoring import SLOSpec
from objectives.load import GaugeSample
from objectives.load import MetricName

QUEUE_WINDOW_S = 15.0
QUEUE_GROWTH_SHARE = 0.25
QUEUE_MIN_SAMPLES = 8
QUEUE_MIN_DEPTH = 8
PERCENTILE_RULE_FAMILIES = ("ttft", "tpot", "e2el")  # whose certain bound a request in flight gives



class Rule(Protocol):
    def lost(self, records: Sequence[RequestRecord], now: float) -> Abort | None:
        """Whether the stage has certainly violated this SLO by `now`."""
        ...


def violators_needed(planned: int, q: float) -> int:
    """How many of `planned` values above a bound make their q-quantile (numpy's linear
    interpolation) exceed it whatever the others are."""
    return planned - math.floor((planned - 1) * q)


def _certain_latency_s(family: str, r: RequestRecord, now: float) -> float | None:
    """A lower bound on the request's final latency (s) as far as it is known at `now`."""
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
        least = sorted(over, reverse=True)[need - 1] * 1000.0
        return Abort(f"{self.metric} > {self.bound_ms:.4g} ms is certain: {len(over)} of "
                     f"{self.planned} planned requests already over it",
                     (least - self.bound_ms) / self.bound_ms, self.metric, least)


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
        return Abort(f"error_rate > {self.bound:g} is certain: {failed} of {self.planned} planned "
                     "requests failed", margin, "error_rate", failed / self.planned)


def rules_for(slos: Sequence[SLOSpec], planned_by_class: dict[str, int]) -> list[Rule]:
    """The SLOs that can be decided early, as rules over a stage with this many planned requests."""
    total = sum(planned_by_class.values())
    rules: list[Rule] = []
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


def queue_runaway(samples: Sequence[GaugeSample], rate: float, now: float) -> Abort | None:
    """The waiting queue has grown steadily over the last window (see the module docstring)."""
    recent = [s for s in samples if now - s.t <= QUEUE_WINDOW_S and not math.isnan(s.waiting)]
    if len(recent) < QUEUE_MIN_SAMPLES or rate <= 0:
        return None
    t = np.array([s.t for s in recent])
    waiting = np.array([s.waiting for s in recent])
    if np.ptp(t) < QUEUE_WINDOW_S / 2:
        return None
    slope = float(np.polyfit(t - t[0], waiting, 1)[0])
    # A burst queues a few seconds of arrivals and drains; a runaway keeps climbing: ask for a
    # steady climb and a queue deeper than half the window's arrivals.
    depth = max(QUEUE_MIN_DEPTH, 0.5 * rate * QUEUE_WINDOW_S)
    if slope >= QUEUE_GROWTH_SHARE * rate and waiting[-1] >= depth:
        return Abort(f"waiting queue growing without bound: {waiting[0]:.0f} -> {waiting[-1]:.0f} in "
                     f"{t[-1] - t[0]:.0f} s (+{slope:.2f}/s at {rate:.3g} req/s offered)")
    return None




def abort_check(slos: Sequence[SLOSpec], rate: float) -> AbortCheck:
    """One function for the load generator to call while a stage runs: the first reason to stop.

    It is handed every planned record (sent or not), so the plan's size per class, which the
    percentile rules count against, is read from the records on the first call."""
    rules: list[Rule] | None = None

    def check(records: Sequence[RequestRecord], now: float, samples: Sequence[GaugeSample]) -> Abort | None:
        nonlocal rules
        if rules is None:
            rules = rules_for(slos, dict(Counter(r.class_name for r in records)))
        for rule in rules:
            verdict = rule.lost(records, now)
            if verdict is not None:
                return verdict
        return queue_runaway(samples, rate, now)

    return check
