"""The order requests come in: each request's class (`ClassOrder`), and where in its class's
length and prefix distributions it falls (`unit_points`, through `LengthDist.quantile`).
Representative in every window, by construction.

Drawing each request's class and lengths independently makes a short run's mix a matter of
luck: `mixed`'s seed once drew 19 `short` requests in a row (0.7^19, about 0.1%), and every
stage of every trial replayed that prefix, so a stage of 16 requests measured a workload the
scenario does not describe. Here instead:

* **Classes follow a quota order** (`ClassOrder`, Tijdeman's chairman assignment): each
  request goes to a class that is behind its share, the one that would soonest fall too far
  behind. With rational weights the order is periodic (its period is the weights' common
  denominator, at most `MAX_PERIOD`), so request i's class and its rank within the class are
  O(1). Any window of n consecutive requests holds each class's weight times n to within
  `window_bound(k)` = 2 - 1/(k-1) requests: within one for two classes (the order is then a
  Sturmian word: every window has the floor or the ceiling of its share), within 1.5 for three.
  No order can promise one request for three classes and every weight vector (an exhaustive
  search finds none for 0.15/0.05/0.80, `tests/unit/loadgen/test_request_order.py`); for the
  weights scenarios usually write (0.5/0.3/0.2, 0.6/0.3/0.1) this one holds one.
* **Within a class, lengths and prefixes are stratified** (`unit_points`): the class's j-th
  request takes the j-th point of a Kronecker sequence (frac(s + j alpha), one alpha a dimension), and
  its prompt length, output length and prefix are that point's coordinates through each
  distribution's quantile function. A Kronecker sequence looks the same from any start (a
  window of it is the sequence from another offset), so a short window still spans each
  class's quantiles, its tails included.
* **The seed picks the phase**: where in the period the order starts and each class's offsets
  `s`, so two seeds give two orders of the same quality.

Common random numbers hold: request i depends on (seed, stream, i) alone, so a stage that sends
requests a .. a+n-1 sends the same ones in every trial, and a longer stage sends those and more.
The order is a module of its own, apart from what a class is (`request_class`): the request
builder (`prompts`) and the session scripts (`sessions`) both place their requests by it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from functools import lru_cache

import numpy as np

from loadgen import random_streams

# Weights are read as fractions of denominator at most 1000 where their common denominator stays
# within MAX_PERIOD (0.7/0.3: 10), else as multiples of 1/MAX_PERIOD: a window of n requests then
# lies off the weights themselves by at most n/MAX_PERIOD more than off its shares.
MAX_DENOMINATOR = 1000
MAX_PERIOD = 100_000
STRATA_DIMS = 3  # prompt length, output length, shared prefix


def _fractions(weights: tuple[float, ...]) -> list[Fraction]:
    """The weights as shares that sum to 1 exactly, with a common denominator of at most
    MAX_PERIOD; none is 0."""
    total = math.fsum(weights)
    shares = [max(Fraction(w / total).limit_denominator(MAX_DENOMINATOR), Fraction(1, MAX_PERIOD)) for w in weights]
    if math.lcm(*(s.denominator for s in shares)) > MAX_PERIOD:
        shares = [Fraction(max(1, round(w / total * MAX_PERIOD)), MAX_PERIOD) for w in weights]
    # each share was rounded on its own: the largest takes up what they miss or add together
    big = max(range(len(shares)), key=lambda c: shares[c])
    shares[big] += 1 - sum(shares)
    return shares


@lru_cache(maxsize=64)
def _period(weights: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(one period of the quota order, each class's count before each position of it).

    Tijdeman's chairman assignment: at request t, among the classes at least 1/(2k-2) of a
    request behind their share, the one that would soonest fall 1 - 1/(2k-2) behind. Every
    class's count then stays within 1 - 1/(2k-2) of its share after every request, so any
    window's count within 2 - 1/(k-1) of it; with rational shares the order is periodic."""
    shares = _fractions(weights)
    k = len(shares)
    q = math.lcm(*(s.denominator for s in shares))
    quota = [int(s * q) for s in shares]
    counts = [0] * k
    order = np.zeros(q, dtype=np.int64)
    # In units of 1/(q (2k-2)) requests, to stay in integers: class c is behind its share after
    # request t by (quota_c t - count_c q) / q; it is due from 1/(2k-2) behind, and falls
    # 1 - 1/(2k-2) behind after (1 - 1/(2k-2) - behind) / share_c more requests.
    unit = 2 * k - 2
    for t in range(1, q + 1 if k > 1 else 1):
        behind = [(quota[c] * t - counts[c] * q) * unit for c in range(k)]
        due = [c for c in range(k) if behind[c] >= q] or list(range(k))
        best = due[0]
        for c in due[1:]:  # the soonest to fall too far behind: compare (k q - q - behind) / quota
            if ((unit - 1) * q - behind[c]) * quota[best] < ((unit - 1) * q - behind[best]) * quota[c]:
                best = c
        counts[best] += 1
        order[t - 1] = best
    if k > 1 and counts != quota:  # the shares' remainders return to 0 at the period's end
        raise AssertionError(f"quota order did not close its period: {counts} vs {quota}")
    before = np.zeros((k, q + 1), dtype=np.int64)
    for c in range(k):
        before[c, 1:] = np.cumsum(order == c)
    return order, before


def window_bound(classes: int) -> float:
    """How far any window's count of a class can lie from its weight times the window's length
    (strictly less than this): 2 - 1/(k-1) for k classes, Tijdeman's bound doubled."""
    return 0.0 if classes < 2 else 2.0 - 1.0 / (classes - 1)


def mix_deviation(counts: Mapping[str, int], weights: Mapping[str, float]) -> float:
    """How far, in requests, a stage's count of a class lies at most from the class's share of the
    stage's requests (`weights` need not sum to 1); below `window_bound` for a window of this
    order."""
    n, total = sum(counts.values()), sum(weights.values())
    return max((abs(counts.get(c, 0) - w / total * n) for c, w in weights.items()), default=0.0)


class ClassOrder:
    """Request i's class and its rank among the requests of that class before it (from index 0)."""

    def __init__(self, weights: tuple[float, ...] | list[float], seed: int, stream: int = 0):
        self.weights = tuple(float(w) for w in weights)
        self.order, self.before = _period(self.weights)
        self.period = len(self.order)
        self.offset = int(random_streams.seeded(seed, random_streams.CLASS_ORDER, stream).integers(self.period))

    def _count(self, c: int, x: int) -> int:
        """Class c's requests among positions 0 .. x-1 of the periodic order."""
        full, rest = divmod(x, self.period)
        return full * int(self.before[c, self.period]) + int(self.before[c, rest])

    def class_of(self, i: int) -> int:
        return int(self.order[(self.offset + i) % self.period])

    def rank_of(self, i: int) -> int:
        """How many requests of request i's class come before it (from request 0 on)."""
        c = self.class_of(i)
        return self._count(c, self.offset + i) - self._count(c, self.offset)

    def counts(self, first: int, n: int) -> list[int]:
        """Each class's requests among first .. first+n-1."""
        a, b = self.offset + first, self.offset + first + n
        return [self._count(c, b) - self._count(c, a) for c in range(len(self.weights))]


# Each dimension's step: quadratic irrationals with small partial quotients (the golden ratio's
# 1, then sqrt(6)'s 2 and 4, sqrt(2)'s 2), each a good sequence alone (10 consecutive points
# reach within 15-17% of both ends of (0, 1) from any start), and rationally independent, so
# prompt and output lengths do not move in step.
_STEPS = np.array([(math.sqrt(5) - 1) / 2, math.sqrt(6) - 2, math.sqrt(2) - 1])


def unit_points(seed: int, stream: int, class_index: int, ranks: np.ndarray | int) -> np.ndarray:
    """The stratified points in (0, 1)^STRATA_DIMS of a class's requests of the given ranks."""
    ranks = np.atleast_1d(np.asarray(ranks, dtype=np.float64))
    start = random_streams.seeded(seed, random_streams.LENGTH_STRATA, stream, class_index).random(STRATA_DIMS)
    points = np.mod(start[None, :] + ranks[:, None] * _STEPS[None, :], 1.0)
    # never exactly 0 or 1: the quantile functions of unbounded distributions are infinite there
    return np.clip(points, 1e-9, 1 - 1e-9)
