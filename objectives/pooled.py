"""Percentiles over the requests of several runs pooled, with intervals from a two-level bootstrap.

A p95 read from each run's ~24 requests is decided by its one or two slowest; the same p95 read
from the requests of 3 runs pooled rests on 72. Runs differ by more than their requests do (a
server start, the machine's drift), so the interval resamples both levels: runs with
replacement, then the requests within each drawn run with replacement, and the percentile of
the pooled draw (Davison & Hinkley's two-stage bootstrap). Paired comparisons draw the same
rounds for both sides (runs are interleaved in rounds), requests within each side's run apart.

Pure and vectorised (numpy), seeded as `objectives.statistics`, so a report reads the same twice.
Percentiles are numpy's linear ones over milliseconds, as the per-run metrics. A request an
early abort cut short before its first token (completion) is censored: it had waited at least
from its sending to the stage's end. It enters as that lower bound, and a percentile it moves is
marked `at_least` (its value is a lower bound on the true one). A failed request (an error, a
timeout, no token) has no latency: as in the per-run metrics (`loadgen.metrics`, `failed_above`)
it counts as a value above every measured one (+inf here), so a pooled percentile it reaches has
no value (NaN), a resample it reaches lies above every value, and losing requests never makes
a configuration look faster.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen import MetricName
from objectives.statistics import CONFIDENCE, N_RESAMPLES, NAN_DIFFERENCE, SEED, Difference, Interval, Kind

# A value larger than any latency in ms: what a censored request could be, to see whether it moves a percentile.
_UNBOUNDED = 1e18
POOLED_FAMILIES = ("ttft", "tpot", "e2el")


@dataclass(frozen=True)
class RunRequests:
    """One run's requests for one metric: latencies in ms, and which are only lower bounds."""

    values: np.ndarray  # +inf: a failed request, above every measured value
    censored: np.ndarray  # bool, same length

    def __len__(self) -> int:
        return len(self.values)


def pooled_metric(metric: str) -> bool:
    """Whether `metric` is a latency percentile that pooled requests can give (`ttft_p95_ms@short`)."""
    name = MetricName.parse(metric)
    return (
        name.family in POOLED_FAMILIES
        and name.statistic not in (None, "mean", "median")
        and name.quantile is not None
        and name.unit == "ms"
    )


def run_requests(samples: dict[str, list[Any]], metric: str, elapsed_s: float | None = None) -> RunRequests:
    """The requests of one run's stage (its columnar "samples") that `metric` reads, in ms.
    A failed request enters as +inf (above every value, as the per-run metrics count it); a
    request cut short by an abort enters as `elapsed_s - sent_s` (a lower bound) for TTFT and
    E2EL when `elapsed_s` (the stage's length) is known, else is left out."""
    name = MetricName.parse(metric)
    values, censored = [], []
    n = len(samples.get("sent_s", []))
    for i in range(n):
        if name.cls is not None and samples["class"][i] != name.cls:
            continue
        ttft, e2e = samples["ttft_s"][i], samples["e2e_s"][i]
        if samples["ok"][i]:
            value = None
            if name.family == "ttft":
                value = ttft
            elif name.family == "e2el":
                value = e2e
            elif name.family == "tpot" and ttft is not None and e2e is not None and samples["output_tokens"][i] > 1:
                value = (e2e - ttft) / (samples["output_tokens"][i] - 1)
            if value is not None:
                values.append(value)
                censored.append(False)
        elif not samples["aborted"][i]:  # failed
            values.append(math.inf)
            censored.append(False)
        elif elapsed_s is not None and name.family in ("ttft", "e2el"):
            own = ttft if name.family == "ttft" else e2e
            if own is None:
                values.append(max(0.0, elapsed_s - samples["sent_s"][i]))
                censored.append(True)
    return RunRequests(np.asarray(values, dtype=float) * 1000.0, np.asarray(censored, dtype=bool))


def _between(a: np.ndarray, b: np.ndarray, frac: np.ndarray) -> np.ndarray:
    """numpy's linear interpolation from `a` to `b` (a <= b), +inf where it reads a failed
    request (+inf): numpy itself gives NaN there (inf - inf) or a number for `frac` 0."""
    with np.errstate(invalid="ignore"):
        out = np.where(frac == 0, a, a + frac * (b - a))
    return np.where(np.isinf(a) | ((frac > 0) & np.isinf(b)), np.inf, out)


def _percentile_of_rows(draws: np.ndarray, counts: np.ndarray, q: float | np.ndarray) -> np.ndarray:
    """numpy's linear q-quantile of each row's first `counts[row]` values (the rest are NaN pads);
    +inf where it reads a failed request."""
    ordered = np.sort(draws, axis=-1)  # +inf (failed) before the NaN pads, which sort last
    h = (counts - 1) * q
    lo = np.floor(h).astype(int)
    hi = np.minimum(lo + 1, counts - 1)
    a = np.take_along_axis(ordered, lo[:, None], axis=-1)[:, 0]
    b = np.take_along_axis(ordered, hi[:, None], axis=-1)[:, 0]
    return _between(a, b, h - lo)


def _quantiles(values: np.ndarray, qs: Sequence[float]) -> np.ndarray:
    """numpy's linear quantiles `qs` of `values`, +inf where one reads a +inf (a failed request)."""
    ordered = np.sort(np.asarray(values, dtype=float))
    if np.isfinite(ordered).all():
        return np.percentile(ordered, np.asarray(qs) * 100)
    return _percentile_of_rows(np.tile(ordered, (len(qs), 1)), np.full(len(qs), len(ordered)), np.asarray(qs))


def _padded(runs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    sizes = np.array([len(r) for r in runs])
    table = np.full((len(runs), max(1, sizes.max())), np.nan)
    for i, r in enumerate(runs):
        table[i, : len(r)] = r
    return table, sizes


def resampled_percentiles(runs: Sequence[np.ndarray], q: float, picks: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The pooled q-quantile of each two-level resample: `picks[b, r]` the run drawn into slot r
    of resample b, `u[b, r, m]` uniform in [0, 1) choosing its m-th request
    (`floor(u * size of that run)`; slots past the run's size unused: `u` may be wider than
    these runs, as when one set of draws serves two sides of a comparison)."""
    table, sizes = _padded(runs)
    u = u[..., : table.shape[1]]
    drawn = sizes[picks]  # (B, R)
    idx = np.minimum((u * drawn[..., None]).astype(int), np.maximum(drawn[..., None] - 1, 0))
    values = table[picks[..., None], idx]  # (B, R, M)
    values = np.where(np.arange(table.shape[1]) < drawn[..., None], values, np.nan)
    return _percentile_of_rows(values.reshape(len(picks), -1), drawn.sum(axis=1), q)


def draws(rng: np.random.Generator, n_runs: int, longest: int, n_resamples: int) -> tuple[np.ndarray, np.ndarray]:
    """The random draws of a two-level bootstrap, in this order: runs, then requests."""
    return rng.integers(0, n_runs, size=(n_resamples, n_runs)), rng.random((n_resamples, n_runs, max(1, longest)))


def _ends(stats: np.ndarray) -> tuple[float, float]:
    """The 95 % interval of the resampled statistics; an end that resamples reached by failed
    requests decide is +inf (unbounded); NaN (a resample that says nothing) makes both NaN."""
    if np.isnan(stats).any():
        return math.nan, math.nan
    tail = (1.0 - CONFIDENCE) / 2
    low, high = _quantiles(stats, [tail, 1 - tail])
    return float(low), float(high)


def _lifted(run: RunRequests) -> np.ndarray:
    return np.where(run.censored, _UNBOUNDED, run.values)


def _pooled_point(runs: Sequence[np.ndarray], q: float) -> float:
    """The q-quantile of the runs' values pooled (numpy's linear one, as the per-run metrics);
    +inf where it reads a failed request."""
    return float(_quantiles(np.concatenate(runs), [q])[0])


def _no_value(x: float) -> float:
    """A percentile that failed requests reach has no value (NaN), as in the per-run metrics."""
    return x if math.isfinite(x) else math.nan


def pooled_percentile(
    runs: Sequence[RunRequests], q: float, *, n_resamples: int = N_RESAMPLES, seed: int = SEED
) -> Interval:
    """The q-quantile of every run's requests pooled, its two-level bootstrap 95% interval, and
    whether it is only a lower bound (censored requests decide it). `n` is the number of runs.
    Failed requests reach it: no value (NaN); its interval's high end +inf where they reach
    the resamples that decide it."""
    runs = [r for r in runs if len(r)]
    if not runs:
        return Interval(math.nan, math.nan, math.nan, 0)
    point = _no_value(_pooled_point([r.values for r in runs], q))
    # lifting the censored requests to their unknown true values moves it (into the failed too)
    at_least = math.isfinite(point) and not _pooled_point([_lifted(r) for r in runs], q) <= point
    if len(runs) == 1 and len(runs[0]) == 1:
        return Interval(point, point, point, 1, at_least)
    picks, u = draws(np.random.default_rng(seed), len(runs), max(len(r) for r in runs), n_resamples)
    low, high = _ends(resampled_percentiles([r.values for r in runs], q, picks, u))
    return Interval(point, low, high, len(runs), at_least)


def pooled_difference(
    candidate: Sequence[RunRequests | None],
    reference: Sequence[RunRequests | None],
    q: float,
    *,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> Difference:
    """The candidate's pooled q-quantile against the reference's, round by round (`candidate[i]`
    and `reference[i]` ran in round i; a round where either failed, None or empty, is left
    out): relative where the reference's pooled value is positive, absolute otherwise. The
    interval resamples rounds (the same for both sides), then requests within each run. Where
    failed requests reach either side's pooled value the difference has no value (NaN); a
    resample they reach on one side lies above every value there (the candidate's: +inf, the
    reference's: -100 % or -inf), on both sides it says nothing and leaves the interval NaN."""
    rounds = [(a, b) for a, b in zip(candidate, reference) if a is not None and b is not None and len(a) and len(b)]
    if not rounds:
        return NAN_DIFFERENCE
    a_runs, b_runs = [a.values for a, _ in rounds], [b.values for _, b in rounds]
    a_point, b_point = _pooled_point(a_runs, q), _pooled_point(b_runs, q)
    relative = b_point > 0 and all(np.all(r > 0) for r in b_runs)
    kind: Kind = "relative" if relative else "absolute"

    def diff(x, y):
        with np.errstate(invalid="ignore"):
            return x / y - 1.0 if relative else x - y

    point = _no_value(float(diff(a_point, b_point))) if math.isfinite(a_point + b_point) else math.nan
    n = len(rounds)
    if n == 1:
        return Difference(point, point, point, 1, kind=kind)  # one round says nothing of the runs' noise
    rng = np.random.default_rng(seed)
    longest = max(len(r) for r in a_runs + b_runs)
    picks, u_a = draws(rng, n, longest, n_resamples)
    u_b = rng.random(u_a.shape)
    stats = diff(resampled_percentiles(a_runs, q, picks, u_a), resampled_percentiles(b_runs, q, picks, u_b))
    low, high = _ends(stats)
    return Difference(point, low, high, n, kind=kind)
