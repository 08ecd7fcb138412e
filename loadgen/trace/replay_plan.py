"""How a trace is replayed: which rows, when each is due, and lengths that fit the model.

A run replays a window of consecutive requests from a seeded start in the trace, which is
treated as a loop (after its last request comes its first, one mean gap later), so a window
of any length exists and request i of a run is always the same row: a longer stage replays
the rows of a shorter one and then more, and trials of a study replay the same traffic.

The window keeps the trace's own gaps between requests, scaled by one factor so that the
window's mean rate is the run's rate: the last of n requests is due at n/rate, as the
Poisson and gamma schedules (`loadgen.arrivals`) are rescaled. A burst stays a burst and a lull a
lull, so the coefficient of variation of the gaps is the trace's; the capacity search and
`capacity_fraction` move the rate as they do for any other arrival process.

Lengths beyond the model's context are clipped (`clip_lengths`), and counted.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from loadgen import random_streams
from loadgen.trace.formats import Trace, TraceError


def window_start(n_rows: int, seed: int) -> int:
    """The row a run's window starts at: drawn from the seed, so the same seed replays the same traffic."""
    return int(random_streams.seeded(seed, random_streams.TRACE_WINDOW).integers(n_rows))


def window_rows(n_rows: int, start: int, first: int, n: int) -> np.ndarray:
    """Rows of requests first .. first+n-1 of a window that starts at row `start` (wrapping)."""
    return (start + first + np.arange(n, dtype=np.int64)) % n_rows


def warmup_rows(n_rows: int, start: int, first: int, n: int) -> np.ndarray:
    """Rows of warm-up requests first .. first+n-1: the rows before the window, going back from
    its start (wrapping), so the warm-up is traffic of the same kind and never a measured row
    (unless the trace is shorter than both together)."""
    return (start - 1 - first - np.arange(n, dtype=np.int64)) % n_rows


def mean_gap(arrival_s: np.ndarray) -> float:
    n = len(arrival_s)
    return float(arrival_s[-1] - arrival_s[0]) / (n - 1) if n > 1 else 1.0


def gaps_before(arrival_s: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The time between each row's request and the one before it in the trace; before the
    first row (where the loop closes) the trace's mean gap."""
    rows = np.asarray(rows, dtype=np.int64)
    previous = arrival_s[np.maximum(rows - 1, 0)]
    gaps = arrival_s[rows] - previous
    seam = mean_gap(arrival_s)
    if seam <= 0:  # every request at one instant: the loop closes after a nominal second
        seam = 1.0
    return np.where(rows == 0, seam, gaps)


def scale_to_rate(gaps: np.ndarray, rate: float) -> np.ndarray:
    """Due times (s from the start) with the gaps' shape, scaled so the last of n is due at n/rate."""
    if not rate > 0:
        raise ValueError(f"rate must be > 0 requests/s, got {rate}")
    total = float(np.sum(gaps))
    n = len(gaps)
    if n == 0:
        return np.zeros(0)
    if total <= 0:
        raise TraceError(
            f"the trace's {n} requests from the window's start all arrived at one instant: "
            "no inter-arrival pattern to scale (give the trace sub-second timestamps, or a longer run)"
        )
    # The last due time exactly n/rate (a duration bound of n/rate keeps all n; float rounding would not).
    return np.minimum(np.cumsum(gaps) * ((n / rate) / total), n / rate)


def replay_offsets(trace: Trace, seed: int, n: int, rate: float, first: int = 0) -> np.ndarray:
    """Due times of requests first .. first+n-1 of the seeded window, at `rate` requests/s on
    average (a load stage replays its own slice of the trace, in the trace's order)."""
    if n < 1:
        raise TraceError(f"{trace.source}: an empty window: the run asks for {n} requests")
    rows = window_rows(len(trace), window_start(len(trace), seed), first, n)
    return scale_to_rate(gaps_before(trace.arrival_s, rows), rate)


def clip_lengths(prompt: np.ndarray, output: np.ndarray, max_total: int) -> tuple[np.ndarray, np.ndarray]:
    """Lengths with prompt + output <= max_total. Where a request exceeds it, each of the two
    keeps at least half the context if it asked for that much: a long output is cut to what is
    left after the prompt (or half the context), then the prompt to what the output leaves."""
    if max_total < 2:
        raise ValueError(f"max_total must be >= 2 (one prompt and one output token), got {max_total}")
    prompt = np.asarray(prompt, dtype=np.int64)
    output = np.asarray(output, dtype=np.int64)
    over = prompt + output > max_total
    out = np.where(over, np.minimum(output, max_total - np.minimum(prompt, max_total // 2)), output)
    pro = np.where(over, np.minimum(prompt, max_total - out), prompt)
    return pro, out


def clipped(trace: Trace, max_total: int | None) -> tuple[Trace, int]:
    """The trace with its lengths clipped to `max_total` (None: as they are), and how many requests changed."""
    if max_total is None:
        return trace, 0
    pro, out = clip_lengths(trace.prompt_tokens, trace.output_tokens, max_total)
    changed = int(np.count_nonzero((pro != trace.prompt_tokens) | (out != trace.output_tokens)))
    if not changed:
        return trace, 0
    return replace(trace, prompt_tokens=pro, output_tokens=out), changed
