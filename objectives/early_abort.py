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
  queue holds at least that many seconds of arrivals.
Means, ITL (pooled per chunk, so its count is not known in advance) and throughputs have no
certain early verdict and never abort a stage.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from objectives.records import RequestRecord
from objectives.scoring import SLOSpec
from objectives.server_metrics import GaugeSample

QUEUE_WINDOW_S = 8.0
QUEUE_GROWTH_SHARE = 0.25
QUEUE_MIN_SAMPLES = 5

_PERCENTILE = re.compile(r"^(ttft|tpot|e2el)_(median|p(\d+))_ms(?:@([\w.-]+))?$")


class Rule(Protocol):
    def lost(self, records: Sequence[RequestRecord], now: float) -> str | None:
        """Why the stage has certainly violated this SLO by `now`, or None."""
        ...


def violators_needed(planned: int, q: float) -> int:
    """How many of `planned` values above a bound make their q-quantile (numpy's linear
    interpolation) exceed it whatever the others are."""
    return planned - math.floor((planned - 1) * q)


def _certain_latency_s(family: str, r: RequestRecord, now: float) -> float | None:
    """A lower bound on the request's final latency (s) as far as it is known at `now`."""
    if math.isnan(r.send_time) or r.error_kind is not None:
        return None
    done = not math.isnan(r.end_time)
    if family == "ttft":
        return r.chunk_times[0] - r.send_time if r.chunk_times else (None if done else now - r.send_time)
    if family == "e2el":
        if done:
            return r.chunk_times[-1] - r.send_time if r.chunk_times else None
        return now - r.send_time
    # tpot: (last - first) / (n - 1); in flight, the last token is still to come
    n = r.expected_output_tokens if not done else r.output_tokens
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

    def lost(self, records: Sequence[RequestRecord], now: float) -> str | None:
        need = violators_needed(self.planned, self.q)
        bound_s = self.bound_ms / 1000.0
        over = 0
        for r in records:
            if self.class_name is not None and r.class_name != self.class_name:
                continue
            latency = _certain_latency_s(self.family, r, now)
            if latency is not None and latency > bound_s:
                over += 1
                if over >= need:
                    return (f"{self.metric} > {self.bound_ms:.4g} ms is certain: {over} of "
                            f"{self.planned} planned requests already over it")
        return None


@dataclass(frozen=True)
class ErrorRateRule:
    bound: float
    planned: int

    def lost(self, records: Sequence[RequestRecord], now: float) -> str | None:
        allowed = math.floor(self.bound * self.planned)
        failed = sum(1 for r in records if r.error_kind is not None and not r.aborted)
        if failed > allowed:
            return f"error_rate > {self.bound:g} is certain: {failed} of {self.planned} planned requests failed"
        return None


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
        m = _PERCENTILE.match(slo.metric)
        if m is None:
            continue
        family, stat, digits, cls = m.groups()
        q = 0.5 if stat == "median" else int(digits) / 100.0
        planned = planned_by_class.get(cls, 0) if cls else total
        if planned > 0 and 0 < q < 1:
            rules.append(PercentileRule(slo.metric, family, q, cls, slo.max, planned))
    return rules


def queue_runaway(samples: Sequence[GaugeSample], rate: float, now: float) -> str | None:
    """The waiting queue has grown steadily over the last window (see the module docstring)."""
    recent = [s for s in samples if now - s.t <= QUEUE_WINDOW_S and not math.isnan(s.waiting)]
    if len(recent) < QUEUE_MIN_SAMPLES or rate <= 0:
        return None
    t = np.array([s.t for s in recent])
    waiting = np.array([s.waiting for s in recent])
    if np.ptp(t) < QUEUE_WINDOW_S / 2:
        return None
    slope = float(np.polyfit(t - t[0], waiting, 1)[0])
    floor = QUEUE_GROWTH_SHARE * rate * QUEUE_WINDOW_S
    if slope >= QUEUE_GROWTH_SHARE * rate and waiting[-1] >= max(1.0, floor):
        return (f"waiting queue growing without bound: {waiting[0]:.0f} -> {waiting[-1]:.0f} in "
                f"{t[-1] - t[0]:.0f} s (+{slope:.2f}/s at {rate:.3g} req/s offered)")
    return None


AbortCheck = Callable[[Sequence[RequestRecord], float, Sequence[GaugeSample]], "str | None"]


def abort_check(slos: Sequence[SLOSpec], rate: float) -> AbortCheck:
    """One function for the load generator to call while a stage runs: the first reason to stop.

    It is handed every planned record (sent or not), so the plan's size per class, which the
    percentile rules count against, is read from the records on the first call."""
    rules: list[Rule] | None = None

    def check(records: Sequence[RequestRecord], now: float, samples: Sequence[GaugeSample]) -> str | None:
        nonlocal rules
        if rules is None:
            rules = rules_for(slos, dict(Counter(r.class_name for r in records)))
        for rule in rules:
            reason = rule.lost(records, now)
            if reason is not None:
                return reason
        return queue_runaway(samples, rate, now)

    return check
