"""The likely rule: a stage's verdict predicted from what it has measured, as a probability.

Only the `likely` stopping mode predicts (`objectives.early_abort`), and only from counts the
rules per SLO hand it (`objectives.abort_rules`, as `Chances`), so the prediction is a room of
its own.

A stage stops once a verdict is at least `LIKELY_P` (95 %) probable given what is measured so far.
Per SLO, each planned request is over its bound (a failure, for the error rate) with an unknown
probability p, the same for every request of the stage (exchangeable); p has a Jeffreys
Beta(1/2, 1/2) prior, updated by the requests whose outcome is known (finished, or in flight and
already certain to exceed the bound, as `objectives.abort_rules` reads them). The requests still unknown (in flight, failed, not yet sent) follow the
Beta-binomial predictive, which gives P(miss) = P(known over + future over >= the count
that makes the percentile exceed the bound). A request in flight is censored: counted as
over once it certainly is, otherwise drawn like one not yet sent (which only understates a
miss). Any SLO with P(miss) >= 95 % stops the stage as a likely miss. A capacity stage
(never the target stage, whose metrics are the objectives) also stops as a likely pass once
at least half its planned requests are known and P(some SLO missed) <= 5 % (the sum of the
SLOs' miss probabilities, Boole's inequality), if every SLO it is held to has a rule
(`abort_rules.rules_for`).
When the percentile sits between two values, the undecided count is taken as a miss for a
pass and as a pass for a miss: both stops lean to the full stage's verdict.

Latencies drift within a stage near capacity (the queue builds), which exchangeability ignores:
that makes a likely miss late rather than wrong, and is why a likely pass waits for half the
stage and yields to over-saturation. `tests/unit/objectives/test_stopping_rules.py`
measures the wrong-stop rate on simulated stages; `benchmarks/bench_stopping.py` on stored ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from scipy import stats

from loadgen import Abort, RequestRecord

__all__ = ["LIKELY_P", "PASS_MIN_KNOWN", "PRIOR", "ChanceRule", "Chances", "likely_verdict"]

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
