"""The likely rule: a stage's verdict predicted from what it has measured (see the package)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from scipy import stats

from loadgen import Abort, RequestRecord

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
