"""Statistics over repeated runs: medians with intervals, relative differences, noise, and how
many requests decide a percentile. Pure functions on plain numbers.

Repeats are few (3 by default) and their distribution unknown, so intervals come from the
bootstrap (`scipy.stats.bootstrap`, percentile method, a fixed seed so a report reads the same
twice). With 3 runs a 95% interval of the median is about the runs' range: say it is 3 runs.
Runs of a confirmation phase are interleaved in rounds (A B C A B C ...), so drift on the shared
machine hits every candidate alike and biases no difference. Their intervals still resample
each side on its own: with 3 rounds a paired interval rests on 3 per-round ratios and is as
narrow as their agreement, which can be chance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
from scipy import stats

from loadgen import MetricName
from objectives.practical import PracticalCall, practical_call

CONFIDENCE = 0.95
N_RESAMPLES = 4999
SEED = 20261123
# Fewer requests than this above a percentile, and the percentile is decided by a handful of
# requests: warn (a p95 over 70 requests is decided by its 4 slowest, a p99 over 100 by one).
MIN_TAIL_REQUESTS = 5

Call = PracticalCall  # win, loss, equal (within what matters), tie
Kind = Literal["relative", "absolute"]


@dataclass(frozen=True)
class Interval:
    """A point estimate with its 95% interval, from `n` runs. `at_least`: the value is only a
    lower bound (an early abort raised runs or requests to what was certain when it stopped)."""

    value: float
    low: float
    high: float
    n: int
    at_least: bool = False

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Interval:
        return cls(**d)


NAN_INTERVAL = Interval(math.nan, math.nan, math.nan, 0)


@dataclass(frozen=True)
class Difference(Interval):
    """A candidate against a reference with its interval: relative (candidate / reference - 1)
    where every reference run is positive, absolute (candidate - reference, in the metric's
    unit) otherwise, so a comparison against a zero (a capacity of 0) is still defined."""

    kind: Kind = "relative"


NAN_DIFFERENCE = Difference(math.nan, math.nan, math.nan, 0)


def _finite(values: Sequence[float] | np.ndarray) -> np.ndarray:
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    return arr[np.isfinite(arr)]


def _bootstrap(data: tuple[np.ndarray, ...], statistic, paired: bool) -> tuple[float, float]:
    if all(len(np.unique(d)) == 1 for d in data):  # no spread: the interval is the point
        v = float(statistic(*data, axis=-1))
        return v, v
    res = stats.bootstrap(
        data,
        statistic,
        paired=paired,
        vectorized=True,
        confidence_level=CONFIDENCE,
        n_resamples=N_RESAMPLES,
        method="percentile",
        rng=np.random.default_rng(SEED),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def median_interval(values: Sequence[float], censored: Sequence[bool] = ()) -> Interval:
    """The median of the runs and its bootstrap 95% interval (NaN runs are left out).
    `censored[i]`: run i's value is only a lower bound; the median is then `at_least` when a
    larger true value there could move it (a bound above the median does not)."""
    flags = list(censored) + [False] * (len(values) - len(censored))
    kept = [(float(v), c) for v, c in zip(values, flags) if v is not None and math.isfinite(v)]
    if not kept:
        return NAN_INTERVAL
    arr = np.asarray([v for v, _ in kept])
    med = float(np.median(arr))
    at_least = bool(np.median([math.inf if c else v for v, c in kept]) > med)
    if len(arr) == 1:
        return Interval(med, med, med, 1, at_least)
    low, high = _bootstrap((arr,), _median, paired=False)
    return Interval(med, low, high, len(arr), at_least)


def _median(a: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(a, axis=axis)


def _ratio_of_medians(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.median(a, axis=axis) / np.median(b, axis=axis) - 1.0


def relative_difference(
    candidate: Sequence[float] | np.ndarray, reference: Sequence[float] | np.ndarray, *, paired: bool = False
) -> Interval:
    """median(candidate) / median(reference) - 1, with a bootstrap 95% interval.

    `paired`: run i of both was taken in the same round (interleaved), so rounds are resampled
    together; runs that failed on either side leave their round out. Unpaired (or lengths that
    differ): each side is resampled on its own."""
    if paired and len(candidate) == len(reference):
        both = [
            (a, b)
            for a, b in zip(candidate, reference)
            if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)
        ]
        a, b = (np.asarray(x, dtype=float) for x in zip(*both)) if both else (np.array([]), np.array([]))
    else:
        paired = False
        a, b = _finite(candidate), _finite(reference)
    if len(a) == 0 or len(b) == 0 or np.median(b) == 0:
        return NAN_INTERVAL
    point = float(_ratio_of_medians(a, b))
    n = min(len(a), len(b))
    if len(a) == 1 and len(b) == 1:
        return Interval(point, point, point, 1)
    if n == 1:  # scipy resamples samples of 2 or more; a single run resamples to itself: hold it fixed
        low, high = _bootstrap((a,) if len(b) == 1 else (b,), _ratio_to_fixed(a, b), paired=False)
        return Interval(point, low, high, n)
    low, high = _bootstrap((a, b), _ratio_of_medians, paired=paired)
    return Interval(point, low, high, n)


def _difference_of_medians(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(a, axis=axis) - np.median(b, axis=axis)


def paired_rounds(candidate: Sequence[float], reference: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The rounds where both sides have a finite value (a failed run leaves its round out)."""
    both = [
        (a, b)
        for a, b in zip(candidate, reference)
        if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)
    ]
    return np.asarray([a for a, _ in both], dtype=float), np.asarray([b for _, b in both], dtype=float)


def difference(
    candidate: Sequence[float], reference: Sequence[float], *, paired: bool = False, kind: Kind | None = None
) -> Difference:
    """The candidate's median against the reference's, with a bootstrap 95% interval: relative
    where every reference run is positive (so every resample's reference median is), absolute
    otherwise; the `kind` says which (or, given, is used). `paired` as in `relative_difference`."""
    if paired and len(candidate) == len(reference):
        a, b = paired_rounds(candidate, reference)
    else:
        paired = False
        a, b = _finite(candidate), _finite(reference)
    if len(a) == 0 or len(b) == 0:
        return NAN_DIFFERENCE
    if kind == "relative" or (kind is None and np.all(b > 0)):
        rel = relative_difference(a, b, paired=paired)
        return Difference(rel.value, rel.low, rel.high, rel.n, kind="relative")
    point = float(_difference_of_medians(a, b))
    n = min(len(a), len(b))
    if n == 1:
        # A single run says nothing of its side's noise (a tie, `call`): resample the other side alone.
        if len(a) == 1 and len(b) == 1:
            return Difference(point, point, point, 1, kind="absolute")
        fixed, several = (a, b) if len(a) == 1 else (b, a)
        sign = -1.0 if len(a) == 1 else 1.0
        low, high = _bootstrap((several,), _median, paired=False)
        ends = sorted(sign * (x - float(fixed[0])) for x in (low, high))
        return Difference(point, ends[0], ends[1], n, kind="absolute")
    low, high = _bootstrap((a, b), _difference_of_medians, paired=paired)
    return Difference(point, low, high, n, kind="absolute")


def bracketed_difference(
    candidate: Sequence[tuple[float, float, float]],
    reference: Sequence[tuple[float, float, float]],
    *,
    paired: bool = False,
) -> Difference:
    """Two sides whose runs each bracket their true value: (estimate, low, high) per run, the
    true value somewhere in [low, high] (a capacity: met at low, violated at high). The point
    compares the estimates; the interval runs from the candidate's low ends against the
    reference's high ends to its high ends against the reference's low ends, so no interval is
    narrower than the brackets allow. Relative where every reference low end is positive."""

    def column(side, i):
        return [r[i] for r in side]

    ref_lows = [x for x in column(reference, 1) if math.isfinite(x)]
    kind: Kind = "relative" if ref_lows and min(ref_lows) > 0 else "absolute"
    point = difference(column(candidate, 0), column(reference, 0), paired=paired, kind=kind)
    worst = difference(column(candidate, 1), column(reference, 2), paired=paired, kind=kind)
    best = difference(column(candidate, 2), column(reference, 1), paired=paired, kind=kind)
    if not math.isfinite(point.value):
        return point
    return Difference(
        point.value,
        float(np.nanmin([worst.low, point.low])),
        float(np.nanmax([best.high, point.high])),
        point.n,
        kind=kind,
    )


def ratio(diff: Difference) -> Interval | None:
    """A relative difference as a ratio of the medians with its interval (`3.0x [2.6, 3.6]`);
    None where it is not defined (an absolute difference: the reference is not positive)."""
    if diff.kind != "relative" or not math.isfinite(diff.value):
        return None
    return Interval(diff.value + 1.0, diff.low + 1.0, diff.high + 1.0, diff.n)


def _ratio_to_fixed(a: np.ndarray, b: np.ndarray):
    """`_ratio_of_medians` of the side with several runs, the other side's single run fixed."""

    def statistic(x: np.ndarray, axis: int = -1) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.median(x, axis=axis) / b[0] - 1.0 if len(b) == 1 else a[0] / np.median(x, axis=axis) - 1.0

    return statistic


def call(diff: Interval, direction: Literal["minimize", "maximize"], threshold: float = 0.0) -> Call:
    """A difference (candidate vs reference, relative or absolute) as a verdict: a win when its whole interval
    lies on the good side of 0 and the difference is larger than `threshold` (what matters for the
    metric, `objectives.practical`), a loss on the bad side likewise, "equal" when the whole interval
    lies within the threshold either way, else a tie (the noise can explain it, or its size is not
    known to matter). A side with a single run says nothing of its noise: a tie, whatever the difference.
    """
    if threshold > 0:
        return practical_call(diff.value, diff.low, diff.high, diff.n, direction, threshold)
    if diff.n < 2 or not math.isfinite(diff.low) or diff.contains(0.0):
        return "tie"
    better = diff.high < 0 if direction == "minimize" else diff.low > 0
    return "win" if better else "loss"


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Run-to-run spread: sample standard deviation over the mean (NaN below 2 runs)."""
    arr = _finite(values)
    if len(arr) < 2 or np.mean(arr) == 0:
        return math.nan
    return float(np.std(arr, ddof=1) / abs(np.mean(arr)))


def pooled_cv(groups: Sequence[Sequence[float]]) -> float:
    """One noise figure from several candidates' repeats: the root mean square of their CVs
    (each candidate's level differs; their relative spread is what the machine adds)."""
    cvs = [c for c in (coefficient_of_variation(g) for g in groups) if math.isfinite(c)]
    return float(np.sqrt(np.mean(np.square(cvs)))) if cvs else math.nan


def beyond_noise(relative: float, cv: float, runs_each: int = 1) -> bool:
    """Whether a relative difference between two values, each the median of `runs_each` runs of
    a metric with run-to-run spread `cv`, is larger than that spread explains (two-sided 5%)."""
    if not (math.isfinite(relative) and math.isfinite(cv)):
        return True  # no noise measured: nothing to discount
    return abs(relative) > 1.96 * math.sqrt(2.0 / runs_each) * cv


def percentile_of(metric: str) -> float | None:
    """The quantile a metric name states (`ttft_p95_ms@short` -> 0.95), None for others
    (medians are decided by half the requests)."""
    name = MetricName.parse(metric)
    return name.quantile if name.statistic not in (None, "median") else None


def tail_requests(q: float, n: int) -> int:
    """How many of `n` requests lie above their q-quantile: the ones that decide it."""
    return max(0, math.ceil(round(n * (1.0 - q), 9)))


def requests_for_tail(q: float, tail: int) -> int:
    """How many requests put `tail` of them above their q-quantile (the inverse of `tail_requests`)."""
    return math.ceil(round(tail / (1.0 - q), 9))


def thin_percentile(metric: str, n: float, over: str = "per run") -> str | None:
    """A warning when `metric` is a percentile that `n` requests (`over`: per run, or pooled)
    cannot pin down."""
    q = percentile_of(metric)
    if q is None or not math.isfinite(n):
        return None
    k = tail_requests(q, int(n))
    if k >= MIN_TAIL_REQUESTS:
        return None
    slowest = "the single slowest request" if k <= 1 else f"its {k} slowest requests"
    needed = requests_for_tail(q, MIN_TAIL_REQUESTS)
    return (
        f"{metric} over ~{int(n)} requests {over} is decided by {slowest}; "
        f"{needed}+ requests would put {MIN_TAIL_REQUESTS} above it (pool repeats or lengthen the run)"
    )


def screening_note(metric: str, n: float) -> str | None:
    """Said of the search phase where `metric` is a percentile its ~n requests per trial leave
    to a few: the search screens, the confirmation (requests of its runs pooled) decides."""
    q = percentile_of(metric)
    if q is None or not math.isfinite(n) or tail_requests(q, int(n)) >= MIN_TAIL_REQUESTS:
        return None
    return (
        f"{metric}: the search phase reads it from ~{int(n)} requests per trial, a screen that "
        f"filters configurations; the confirmation decides, from the requests of all its runs pooled "
        f"(at least {requests_for_tail(q, MIN_TAIL_REQUESTS)})"
    )
