"""Whether a stage measured a server in a steady state, and whether the requests its verdict
counted hold the workload's mix: two checks a stage's verdict passes before it may say "met".

**Steady state.** An open loop above a server's capacity never settles: its queue and every new
request's wait for a first token grow for as long as it runs. A stage that ends while they are
still growing has measured how far the backlog got in the time it had, not the server: on a
short stage the requests over a TTFT bound can still be few, and the stage would read "met" at a
rate the server cannot hold. So at its end every stage is judged over its window (after the first
`SETTLE_SHARE` of it, at most `early_abort.settle_s`, 5 s or 10 arrivals: a stage starts on an
empty server, whose queue fills to its level at any rate near capacity):

* the first-token lag: each request's TTFT against its send time (a request without a first token
  enters with its wait so far, a lower bound), least squares;
* the waiting queue: the server's `vllm:num_requests_waiting` samples against time.

Either one climbing at one-sided p < `early_abort.SATURATION_P` by at least the rate of a 5%
overload (`SATURATION_MIN_SLOPE` s of lag per s; the queue by 5% of the offered rate per s, and
by `QUEUE_MIN_DEPTH` / 2 requests in all) is sustained growth: the stage is **not steady** and
its verdict is violated (over-saturated), whatever its counts say. A burst that queues and drains
moves neither fit that far. The verdict carries it as one more entry, `steady_state`, so the
capacity fit and the stored rows read it as they read an SLO.

**Class mix.** The requests an SLO's verdict counts are those whose outcome is known. Where a
stage was cut short, the slow classes' requests are the ones still unknown, and an SLO over all
classes would be read from the fast ones. The counted requests' mix is tested against the
requests the stage sent (which the representative order makes the workload's mix, or a trace
window's own): a chi-square test at p < (1 - confidence) / 2 says it differs beyond chance, and
the stage may not be called met (`class_mix`: undecided, leaning violated).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

from loadgen import GaugeSample
from objectives.early_abort import QUEUE_MIN_DEPTH, SATURATION_MIN_SLOPE, SATURATION_P, settle_s
from objectives.slo_verdict import DEFAULT_CONFIDENCE, SLOVerdict, Verdict

STEADY_STATE = "steady_state"
CLASS_MIX = "class_mix"
SETTLE_SHARE = 0.25  # of a stage's sending window, at most `early_abort.settle_s`, left out as its fill
MIN_POINTS = 6  # fewer requests or gauge samples in the window say nothing either way


@dataclass(frozen=True)
class Trend:
    """A least-squares line through (time, value) over the judged window."""

    start: float  # fitted value at the window's start
    end: float  # ... at its end
    slope: float  # per second
    p: float  # one-sided p-value of slope > 0
    points: int

    def climbing(self, min_slope: float, min_rise: float = 0.0) -> bool:
        return self.p < SATURATION_P and self.slope >= min_slope and self.end - self.start >= min_rise


def _trend(x: np.ndarray, y: np.ndarray) -> Trend | None:
    if len(x) < MIN_POINTS or np.ptp(x) <= 0:
        return None
    if np.ptp(y) <= 0:  # flat: no growth at all
        return Trend(float(y[0]), float(y[0]), 0.0, 1.0, len(x))
    fit = stats.linregress(x, y)
    p = fit.pvalue / 2 if fit.slope > 0 else 1.0 - fit.pvalue / 2
    lo, hi = float(x.min()), float(x.max())
    return Trend(fit.intercept + fit.slope * lo, fit.intercept + fit.slope * hi, float(fit.slope), float(p), len(x))


@dataclass(frozen=True)
class SteadyState:
    """What a stage's end says of its server: settled, or still filling its queue."""

    steady: bool
    window_s: tuple[float, float]  # the part of the stage judged (s from its start)
    lag: Trend | None  # first-token lag (s) against send time
    queue: Trend | None  # waiting requests against time
    reason: str

    def verdict(self) -> SLOVerdict:
        verdict: Verdict = "met" if self.steady else "violated"
        return SLOVerdict(STEADY_STATE, verdict, -1.0 if self.steady else math.nan, basis="steady")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SteadyState:
        trend = {k: Trend(**d[k]) if d.get(k) else None for k in ("lag", "queue")}
        return cls(bool(d["steady"]), tuple(d["window_s"]), trend["lag"], trend["queue"], str(d["reason"]))


def steady_state(
    samples: Mapping[str, Sequence[Any]],
    gauges: Sequence[GaugeSample],
    *,
    start: float,
    sending_s: float,
    end_s: float,
    rate: float,
) -> SteadyState:
    """The stage's steady-state call (see the module docstring). `samples`: its requests
    (`loadgen.request_samples`, times from its start), `gauges`: the server's samples (perf_counter
    times; `start` is the stage's start on that clock), `sending_s`: how long it sent,
    `end_s`: when it ended (its requests without a first token had waited until then)."""
    settle = min(settle_s(rate), SETTLE_SHARE * sending_s)
    window = (settle, sending_s)
    x, y = [], []
    for sent, ttft, ok, aborted in zip(samples["sent_s"], samples["ttft_s"], samples["ok"], samples["aborted"]):
        if sent < settle or sent > sending_s:
            continue
        if ttft is not None:
            x.append(sent)
            y.append(ttft)
        elif ok or aborted:  # still waiting for its first token when the stage ended: at least that long
            x.append(sent)
            y.append(end_s - sent)
    lag = _trend(np.array(x, dtype=float), np.array(y, dtype=float))
    waiting = [(g.t - start, g.waiting) for g in gauges if settle <= g.t - start <= end_s and not math.isnan(g.waiting)]
    queue = _trend(*(np.array(v, dtype=float) for v in zip(*waiting))) if waiting else None
    lag_up = lag is not None and lag.climbing(SATURATION_MIN_SLOPE)
    queue_up = queue is not None and queue.climbing(SATURATION_MIN_SLOPE * rate, QUEUE_MIN_DEPTH / 2)
    if not (lag_up or queue_up):
        return SteadyState(True, window, lag, queue, "settled: neither the first-token lag nor the queue kept growing")
    parts = []
    if lag_up:
        assert lag is not None
        parts.append(f"first-token lag {lag.start * 1000:.0f} -> {lag.end * 1000:.0f} ms (+{lag.slope:.2f} s/s)")
    if queue_up:
        assert queue is not None
        parts.append(f"waiting {queue.start:.0f} -> {queue.end:.0f} (+{queue.slope:.2f}/s)")
    over = f"{window[0]:.0f}-{window[1]:.0f} s"
    return SteadyState(
        False, window, lag, queue, f"over-saturated: still growing at its end ({', '.join(parts)} over {over})"
    )


@dataclass(frozen=True)
class ClassMix:
    """Per class: the requests a stage sent and those whose outcome it knew, and whether the known
    ones hold the sent mix."""

    sent: dict[str, int]
    known: dict[str, int]
    p: float  # chi-square goodness of fit of known against sent; 1.0 when nothing to test
    representative: bool

    def verdict(self) -> SLOVerdict:
        verdict: Verdict = "met" if self.representative else "undecided"
        return SLOVerdict(CLASS_MIX, verdict, -1.0 if self.representative else 1.0, basis="mix")

    def text(self) -> str:
        counts = ", ".join(f"{c} {self.known.get(c, 0)}/{n}" for c, n in self.sent.items())
        return f"requests known/sent by class: {counts} (p = {self.p:.2g})"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ClassMix:
        return cls(dict(d["sent"]), dict(d["known"]), float(d["p"]), bool(d["representative"]))


def class_mix(samples: Mapping[str, Sequence[Any]], confidence: float = DEFAULT_CONFIDENCE) -> ClassMix:
    """The stage's mix check (see the module docstring). A request is known unless an early abort
    cut it short before it finished."""
    sent: dict[str, int] = {}
    known: dict[str, int] = {}
    for cls, aborted in zip(samples["class"], samples["aborted"]):
        sent[cls] = sent.get(cls, 0) + 1
        known[cls] = known.get(cls, 0) + (0 if aborted else 1)
    n_sent, n_known = sum(sent.values()), sum(known.values())
    if len(sent) < 2 or n_known == 0 or n_known == n_sent:
        return ClassMix(sent, known, 1.0, True)
    expected = np.array([sent[c] * n_known / n_sent for c in sent])
    observed = np.array([known[c] for c in sent])
    p = float(stats.chisquare(observed, expected).pvalue)
    return ClassMix(sent, known, p, p >= (1.0 - confidence) / 2)
