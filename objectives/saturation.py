"""A rate above capacity measuring its own backlog: the server's waiting queue growing without
bound (`queue_runaway`), or the queue and the first-token lag both climbing (`over_saturated`).

An open loop above capacity never reaches a steady state (statistics.md): its latencies describe
how long the stage ran, not the configuration. Both rules read a window long enough to hold more
than a burst on any machine (`window_s`) and leave a stage's first seconds out (`settle_s`): a
stage starts on an empty server, whose queue and TTFT climb to their steady level at any rate
near capacity. `objectives.early_abort` stops a stage on them; `objectives.stages.judgement`
reads the same thresholds over a finished stage for its steady-state verdict. Pure.

* Queue runaway: over the last window the least-squares slope of `vllm:num_requests_waiting` is
  at least `QUEUE_GROWTH_SHARE` of the offered rate, and the queue holds more than half the
  window's arrivals and at least `QUEUE_MIN_DEPTH` requests (a burst's queue drains; this one
  does not. Measured: gamma bursts at 0.74 req/s queued 5 requests within 9 s).
* Over-saturation: over the last window the waiting queue and the TTFT of the requests sent
  there both climb (least-squares slopes positive at one-sided p < `SATURATION_P`), the queue by
  at least `QUEUE_MIN_DEPTH` / 2 requests and the TTFT by at least `SATURATION_MIN_SLOPE` s per
  s of sending (arrivals 5 % above what is served).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from loadgen import Abort, GaugeSample, RequestRecord

# The windows are read over time, but they must hold enough arrivals to tell a runaway from a
# burst whatever the machine's speed: at least QUEUE_WINDOW_S, and as long as QUEUE_WINDOW_REQUESTS
# arrivals take (what 15 s held at mixed's target on a 4.9 req/s machine). On a machine three
# times slower a 15 s window held 10 arrivals, one gamma burst, and stopped stages at 40% of
# capacity as over-saturated that ran out below their bounds in full (docs/results.md, "One
# workload on any machine").
QUEUE_WINDOW_S = 15.0
QUEUE_WINDOW_REQUESTS = 30
QUEUE_GROWTH_SHARE = 0.25
QUEUE_MIN_SAMPLES = 8
QUEUE_MIN_DEPTH = 8
SATURATION_P = 0.01
SATURATION_MIN_POINTS = 8
# TTFT climbing by at least this many seconds per second of sending: arrivals at least 5 % above
# what the server serves (a backlog grows at (arrivals - served) / served s per s).
SATURATION_MIN_SLOPE = 0.05
# Not read from a stage's first seconds: a stage starts on an empty server, whose queue and TTFT
# climb to their steady level at any rate near capacity: read over the whole window, the rule
# stopped capacity stages just below capacity that met the SLOs run in full (docs/results.md,
# "Early abort").
SATURATION_SETTLE_S = 5.0
SATURATION_SETTLE_REQUESTS = 10  # ... and at least as long as this many arrivals take


def window_s(rate: float | None) -> float:
    """The window the queue and TTFT are read over at `rate` requests/s (see QUEUE_WINDOW_REQUESTS)."""
    return max(QUEUE_WINDOW_S, QUEUE_WINDOW_REQUESTS / rate) if rate and rate > 0 else QUEUE_WINDOW_S


def settle_s(rate: float | None) -> float:
    """A stage's start left out of the over-saturation window at `rate` requests/s."""
    return max(SATURATION_SETTLE_S, SATURATION_SETTLE_REQUESTS / rate) if rate and rate > 0 else SATURATION_SETTLE_S


def _recent_queue(
    samples: Sequence[GaugeSample], now: float, window: float = QUEUE_WINDOW_S
) -> tuple[np.ndarray, np.ndarray] | None:
    """(times, waiting) of the gauges over the last `window` s, if they span enough of it."""
    recent = [s for s in samples if now - s.t <= window and not math.isnan(s.waiting)]
    if len(recent) < QUEUE_MIN_SAMPLES:
        return None
    t = np.array([s.t for s in recent])
    if np.ptp(t) < window / 2:
        return None
    return t, np.array([s.waiting for s in recent])


def queue_runaway(samples: Sequence[GaugeSample], rate: float, now: float) -> Abort | None:
    """The waiting queue has grown steadily over the last window (see the module docstring)."""
    window = window_s(rate)
    queue = _recent_queue(samples, now, window)
    if queue is None or rate <= 0:
        return None
    t, waiting = queue
    slope = float(np.polyfit(t - t[0], waiting, 1)[0])
    # A burst queues a few seconds of arrivals and drains; a runaway keeps climbing: ask for a
    # steady climb and a queue deeper than half the window's arrivals.
    depth = max(QUEUE_MIN_DEPTH, 0.5 * rate * window)
    if slope >= QUEUE_GROWTH_SHARE * rate and waiting[-1] >= depth:
        return Abort(
            f"waiting queue growing without bound: {waiting[0]:.0f} -> {waiting[-1]:.0f} in "
            f"{t[-1] - t[0]:.0f} s (+{slope:.2f}/s at {rate:.3g} req/s offered)"
        )
    return None


@dataclass(frozen=True)
class Trend:
    """A least-squares line through (time, value) over a judged window."""

    start: float  # fitted value at the window's start
    end: float  # ... at its end
    slope: float  # per second
    p: float  # one-sided p-value of slope > 0
    points: int

    def climbing(self, min_slope: float = 0.0, min_rise: float = 0.0) -> bool:
        return self.p < SATURATION_P and self.slope >= min_slope and self.end - self.start >= min_rise


def trend(x: np.ndarray, y: np.ndarray, min_points: int) -> Trend | None:
    """The line through (x, y); None with fewer than `min_points` points or no spread in x (a
    flat y is a line with no growth, p 1)."""
    if len(x) < min_points or np.ptp(x) <= 0:
        return None
    if np.ptp(y) <= 0:
        return Trend(float(y[0]), float(y[0]), 0.0, 1.0, len(x))
    fit = stats.linregress(x, y)
    p = fit.pvalue / 2 if fit.slope > 0 else 1.0 - fit.pvalue / 2
    lo, hi = float(x.min()), float(x.max())
    return Trend(fit.intercept + fit.slope * lo, fit.intercept + fit.slope * hi, float(fit.slope), float(p), len(x))


def _climbing(x: np.ndarray, y: np.ndarray) -> Trend | None:
    """The line through (x, y) when y rises with x at one-sided p < SATURATION_P."""
    line = trend(x, y, SATURATION_MIN_POINTS)
    return line if line is not None and line.climbing() else None


def over_saturated(
    samples: Sequence[GaugeSample], records: Sequence[RequestRecord], now: float, rate: float | None = None
) -> Abort | None:
    """The waiting queue and TTFT both climbing over the last window (see the module docstring;
    `rate`, the stage's offered requests/s, sets how long the window and the settling are).

    A request sent in the window counts with its TTFT, or, still waiting for its first token,
    with its wait so far once that is longer than the last TTFT measured (a lower bound that
    already shows the climb; shorter waits say nothing yet)."""
    sent_at = [r.send_time for r in records if math.isfinite(r.send_time)]
    if not sent_at:
        return None
    window = window_s(rate)
    settled = min(sent_at) + settle_s(rate)
    queue = _recent_queue([s for s in samples if s.t >= settled], now, window)
    if queue is None:
        return None
    queued = _climbing(*queue)
    if queued is None or queued.end - queued.start < QUEUE_MIN_DEPTH / 2:
        return None
    sent = sorted(
        (r for r in records if max(now - window, settled) <= r.send_time <= now and r.error_kind is None),
        key=lambda r: r.send_time,
    )
    points: list[tuple[float, float]] = []
    last_ttft = math.inf
    for r in sent:
        if r.chunk_times:
            last_ttft = r.chunk_times[0] - r.send_time
            points.append((r.send_time, last_ttft))
        elif now - r.send_time > last_ttft:
            points.append((r.send_time, now - r.send_time))
    if not points:
        return None
    x, y = (np.array(v) for v in zip(*points))
    ttft = _climbing(x, y)
    if ttft is None or ttft.end - ttft.start < SATURATION_MIN_SLOPE * float(np.ptp(x)):
        return None
    return Abort(
        f"over-saturated: the queue and TTFT are both climbing (waiting {queued.start:.0f} -> "
        f"{queued.end:.0f}, TTFT {ttft.start * 1000:.0f} -> {ttft.end * 1000:.0f} ms over the last "
        f"{window:.0f} s)"
    )
