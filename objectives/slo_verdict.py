"""A load stage's SLO verdict from its requests' counts: met, violated, or undecided.

Pure. An SLO on a percentile is a statement about a proportion: `ttft_p95_ms@short <= B` says
that at most 5% of the short requests take longer than B. A stage measures that proportion
from a sample, so its verdict is a test, not a comparison of one number with the bound: of
the `known` requests of the SLO's class, `over` exceeded B, and the exact (Clopper-Pearson)
interval of the proportion over / known decides.

* met: the interval's upper end is at most the limit (1 - q: 5% for a p95);
* violated: its lower end is above the limit;
* undecided: the interval straddles the limit (the stage cannot tell; a stage run on for
  longer can, `objectives.stages`).

Requests under load are not independent: a burst, or a long prefill in front of them, delays
several together, so those over a bound come in runs. The interval then counts each request as
1 / deff of an independent one (`objectives.design_effect`: 1 where they do not cluster), so a
stage whose first requests held one burst is not decided on it.

A request counts where its outcome against the bound is known: finished (its latency is
compared with B), failed (over B: a request that was never answered is never a latency value
and never counts for the SLO), or cut short but already certain to exceed B (a censored
latency: it had waited at least that long). A request cut short before it could be known is
left out of `known`. TPOT is undefined for a one-token request: it is left out of a TPOT SLO.

An error-rate SLO (`error_rate <= b`) is the same test on the failure proportion with limit b.
SLOs with no count form (means, ITL, throughputs) keep their margin (value against bound) as
their verdict, always decided.

`confidence` is two-sided (default 90%: each decision is 95% sure on its side). A stage that is
looked at several times before it stops (`looks`, see `objectives.stages`) would be called
wrongly more often than that by chance alone: each look's interval is widened by Bonferroni's
correction over the planned looks (each side's error divided by the number of looks), so the
whole stage's chance of a wrong decided verdict on either side stays within 1 - confidence.

A verdict left undecided when the stage can run no longer still leans one way: the observed
proportion against the limit (`leaning`), which is what the stage's pass/fail then says.

Some SLOs cannot be called met by a stage of the size planned at all (`decidable_met`: even 0
of n over leaves the interval above the limit): a p95 needs 59 requests of its class with none
over (93 with one), an error-rate bound of 1% about 300. Such an SLO, undecided, is called by
its observed share (`basis` "share": what a single percentile against its bound said before)
and does not hold the stage open; the verdict says so, so a reader knows the stage was too
small to decide. A decided verdict (`basis` "interval") is a decision at the stated confidence.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal

from scipy import stats

from loadgen import SAMPLE_KEYS, MetricName
from objectives.design_effect import OverCount
from objectives.scoring import SLOSpec, slo_key

MET: Final = "met"
VIOLATED: Final = "violated"
UNDECIDED: Final = "undecided"
Verdict = Literal["met", "violated", "undecided"]
# How the verdict was reached: an SLO's counts (`interval`, or `share` where too few to decide) or
# its value (`margin`); a stage's steady state (`steady`) and its counted requests' mix (`mix`),
# which `objectives.stages.judgement` adds beside the SLOs.
Basis = Literal["interval", "share", "margin", "steady", "mix"]
DEFAULT_CONFIDENCE = 0.90
COUNTED_FAMILIES = ("ttft", "tpot", "e2el")  # a latency per request, so a count over the bound


def clopper_pearson(over: float, known: float, confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float]:
    """The exact two-sided interval of a binomial proportion over / known (0-1); counts may be
    effective ones (counts divided by a design effect), which the beta quantiles take as they are."""
    if known <= 0:
        return 0.0, 1.0
    alpha = 1.0 - confidence
    low = 0.0 if over <= 0 else float(stats.beta.ppf(alpha / 2, over, known - over + 1))
    high = 1.0 if over >= known else float(stats.beta.ppf(1 - alpha / 2, over + 1, known - over))
    return low, high


def look_confidence(confidence: float, looks: int) -> float:
    """The two-sided confidence of each of `looks` looks (Bonferroni), so that the stage's
    verdict over all of them is wrong with at most 1 - confidence."""
    return 1.0 - (1.0 - confidence) / max(1, looks)


def decide(
    over: int, known: int, limit: float, confidence: float = DEFAULT_CONFIDENCE, looks: int = 1, deff: float = 1.0
) -> tuple[Verdict, float, float]:
    """(verdict, interval low, interval high) of the proportion over / known against `limit`,
    the counts clustered by the design effect `deff` (`objectives.design_effect`)."""
    low, high = clopper_pearson(over / deff, known / deff, look_confidence(confidence, looks))
    if known > 0 and high <= limit:
        return MET, low, high
    if known > 0 and low > limit:
        return VIOLATED, low, high
    return UNDECIDED, low, high


def decidable_met(limit: float, known: int, confidence: float = DEFAULT_CONFIDENCE, looks: int = 1) -> bool:
    """Whether `known` requests can call the SLO met at all (0 of them over the bound)."""
    return known > 0 and clopper_pearson(0, known, look_confidence(confidence, looks))[1] <= limit


def count_limit(slo: SLOSpec) -> float | None:
    """The proportion an SLO allows over its bound (0.05 for a p95), None for an SLO with no
    count form (a mean, ITL, a throughput, a lower bound)."""
    if slo.max is None:
        return None
    name = MetricName.parse(slo.metric)
    if name.base == "error_rate":
        return float(slo.max)
    q = name.quantile
    if name.family in COUNTED_FAMILIES and q is not None and 0 < q < 1:
        return 1.0 - q
    return None


@dataclass(frozen=True)
class SLOVerdict:
    """One SLO's verdict in one stage. Counted SLOs carry their counts and interval (as
    proportions, 0-1); the others only their margin."""

    slo: str  # the constraint's name (`scoring.slo_key`)
    verdict: Verdict
    margin: float  # the normalized violation of the stage's value (<= 0: within the bound); NaN: none
    limit: float | None = None  # the proportion allowed over the bound
    over: int | None = None
    known: int | None = None
    low: float | None = None
    high: float | None = None
    basis: Basis = "margin"
    # The design effect its counts were judged with, where over 1: its requests over the bound
    # came in runs (`objectives.design_effect`), so they count as fewer independent ones.
    deff: float | None = None

    @property
    def counted(self) -> bool:
        return self.known is not None

    @property
    def share(self) -> float:
        return self.over / self.known if self.over is not None and self.known else math.nan

    @property
    def leaning(self) -> Verdict:
        """The decided verdict, or for an undecided one the side its observed share is on."""
        if self.verdict != UNDECIDED:
            return self.verdict
        if self.counted:
            assert self.limit is not None  # a counted verdict carries its limit (`counted_verdict`)
            return MET if self.known and self.share <= self.limit else VIOLATED
        return MET if self.margin <= 0 else VIOLATED

    def text(self) -> str:
        if self.basis == "steady":
            return f"{self.slo}: {self.verdict} ({'settled' if self.verdict == MET else 'over-saturated: still filling its queue at its end'})"
        if self.basis == "mix":
            held = "hold" if self.verdict == MET else "do not hold"
            return f"{self.slo}: {self.verdict} (the requests counted {held} the stage's class mix)"
        if not self.counted:
            return f"{self.slo}: {self.verdict} (margin {self.margin:+.0%})"
        interval = f"[{self.low:.1%}, {self.high:.1%}]"
        runs = f"; in runs, as {self.known / self.deff:.0f} independent" if self.deff and self.known else ""
        shown = f"{self.over} of {self.known} over ({self.share:.1%} {interval} vs {self.limit:.0%}{runs})"
        if self.basis == "share":
            return f"{self.slo}: {self.verdict} by its share, too few requests to decide: {shown}"
        lean = f", leaning {self.leaning}" if self.verdict == UNDECIDED else ""
        return f"{self.slo}: {self.verdict}{lean}: {shown}"

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SLOVerdict:
        """As `as_dict` wrote it, through JSON (a NaN margin is stored as null)."""
        margin = d.get("margin")
        return cls(**{**d, "margin": math.nan if margin is None else float(margin)})


def margin_verdict(slo: str, margin: float) -> SLOVerdict:
    """An SLO with no count form: decided by its value against its bound."""
    return SLOVerdict(slo, MET if margin <= 0 else VIOLATED, margin)


def counted_verdict(
    slo: str,
    count: OverCount,
    limit: float,
    margin: float,
    confidence: float = DEFAULT_CONFIDENCE,
    looks: int = 1,
    most: int | None = None,
) -> SLOVerdict:
    """A counted SLO's verdict. `most`: the most requests the stage can count for it (its
    length's cap); an undecided SLO that even so many could not call met is called by its share.
    `count.deff`: how its requests over the bound clustered (`objectives.design_effect`)."""
    over, known = count.over, count.known
    verdict, low, high = decide(over, known, limit, confidence, looks, count.deff)
    runs = count.deff if count.deff > 1.0 else None
    out = SLOVerdict(slo, verdict, margin, limit, over, known, low, high, "interval", runs)
    if verdict == UNDECIDED and not decidable_met(limit, max(known, most or 0), confidence, looks):
        return SLOVerdict(slo, out.leaning, margin, limit, over, known, low, high, "share", runs)
    return out


def stage_verdict(verdicts: Iterable[SLOVerdict]) -> Verdict:
    """Violated when any SLO is, met when every one is, else undecided."""
    verdicts = list(verdicts)
    if any(v.verdict == VIOLATED for v in verdicts):
        return VIOLATED
    if all(v.verdict == MET for v in verdicts):
        return MET
    return UNDECIDED


def stage_passed(verdicts: Iterable[SLOVerdict]) -> bool:
    """What a stage's verdict says for a search that must go on: decided verdicts as they
    are, an undecided SLO by its leaning."""
    return all(v.leaning == MET for v in verdicts)


# -- counting a stage's stored requests -----------------------------------------------------------


def _latency_s(family: str, ttft: float | None, e2e: float | None, tokens: int) -> float | None:
    if family == "ttft":
        return ttft
    if family == "e2el":
        return e2e
    if ttft is None or e2e is None or tokens <= 1:
        return None
    return (e2e - ttft) / (tokens - 1)


def sample_outcomes(slo: SLOSpec, samples: Mapping[str, Sequence[Any]], end_s: float | None = None) -> list[bool]:
    """Whether each request of a counted SLO whose outcome is known was over its bound, in the
    stage's order (`loadgen.request_samples`). `end_s`: when the stage stopped (seconds from its
    start), so a request cut short there is known to be over a latency bound once it had waited
    longer than the bound."""
    name = MetricName.parse(slo.metric)
    outcomes: list[bool] = []
    for cls, sent, ttft, e2e, tokens, ok, aborted in _rows(samples):
        if name.cls is not None and cls != name.cls:
            continue
        if name.base == "error_rate":
            if not aborted:
                outcomes.append(not ok)
            continue
        assert slo.max is not None  # a counted SLO is an upper bound (`count_limit`)
        bound_s = float(slo.max) / 1000.0
        latency = _latency_s(name.family, ttft, e2e, tokens or 0)
        if aborted:
            waited = (end_s - sent) if end_s is not None else None
            final = name.family == "ttft" and ttft is not None
            if final and latency is not None:
                outcomes.append(latency > bound_s)
            elif name.family != "tpot" and waited is not None and waited > bound_s:
                outcomes.append(True)
            continue
        if not ok:  # failed or never answered: over the bound, never a latency value
            outcomes.append(True)
            continue
        if latency is None:  # no TPOT for a one-token request
            continue
        outcomes.append(latency > bound_s)
    return outcomes


def slo_verdicts(
    slos: Sequence[SLOSpec],
    samples: Mapping[str, Sequence[Any]] | None,
    margins: Mapping[str, float],
    *,
    end_s: float | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
    looks: int = 1,
    scale: float | None = None,
) -> list[SLOVerdict]:
    """Each SLO's verdict in a stage: counted from its requests where the SLO has a count form
    and the requests were kept, by `margins` (`slo_key` -> normalized violation) otherwise.
    `scale`: how many times its present requests the stage can hold at most (its cap over its
    length so far; None: no more), for `counted_verdict`'s `most`."""
    out = []
    for slo in slos:
        key = slo_key(slo)
        margin = float(margins.get(key, math.nan))
        limit = count_limit(slo)
        if limit is None or samples is None:
            out.append(margin_verdict(key, margin))
            continue
        count = OverCount.of(sample_outcomes(slo, samples, end_s))
        most = math.floor(count.known * scale) if scale else count.known
        out.append(counted_verdict(key, count, limit, margin, confidence, looks, most))
    return out


# -- a stage's length: looked at in slices, run on while undecided -------------------------------


@dataclass(frozen=True)
class StageLength:
    """How long a stage runs: its nominal length, the most it may run on to (`cap_s`), looked at
    every `slice_s`. Before the nominal length only a decided violation stops it (near capacity
    the queue builds and latencies drift up within a stage: an early "met" would read the
    stage's lighter start); from there, it stops at the first look where no SLO that can still
    be decided is undecided, or at the cap."""

    nominal_s: float
    cap_s: float
    slice_s: float

    @property
    def looks(self) -> int:
        return max(1, math.ceil(self.cap_s / self.slice_s - 1e-9))

    def checkpoints(self) -> list[float]:
        return [min(self.cap_s, self.slice_s * (i + 1)) for i in range(self.looks)]

    def scale(self, t: float) -> float:
        """How many times its requests so far the stage can still come to hold."""
        return self.cap_s / t if t > 0 else math.inf


def open_slos(verdicts: Iterable[SLOVerdict]) -> list[SLOVerdict]:
    """The SLOs that hold a stage open: undecided, and decidable by the stage's cap."""
    return [v for v in verdicts if v.verdict == UNDECIDED and v.basis == "interval"]


def stop_reason(verdicts: Sequence[SLOVerdict], t: float, length: StageLength) -> str | None:
    """Why a stage stops at look `t` (None: it runs on; see `StageLength`)."""
    violated = [v for v in verdicts if v.verdict == VIOLATED and v.basis == "interval"]
    if violated:
        return f"decided: {violated[0].text()}"
    if t >= length.nominal_s - 1e-9 and not open_slos(verdicts):
        return "every SLO decided"
    if t >= length.cap_s - 1e-9:
        return "at its cap, undecided"
    return None


def _rows(samples: Mapping[str, Sequence[Any]]) -> list[tuple]:
    return list(zip(*(samples[k] for k in SAMPLE_KEYS)))


def _columns(rows: Sequence[tuple]) -> dict[str, list]:
    return {k: [r[i] for r in rows] for i, k in enumerate(SAMPLE_KEYS)}


def truncated(samples: Mapping[str, Sequence[Any]], t: float) -> dict[str, list]:
    """A stored stage's requests as a stage planned to `t` would have sent them (every request
    sent by then, answered as it was)."""
    return _columns([r for r in _rows(samples) if r[1] <= t])


def seen_at(samples: Mapping[str, Sequence[Any]], t: float) -> dict[str, list]:
    """A stored stage's requests as a look at `t` saw them: sent by then, and those not answered
    by then in flight (marked cut short at `t`, so `sample_outcomes(end_s=t)` counts them once
    they certainly exceed a bound), their first token shown if it had come."""
    out = []
    for cls, sent, ttft, e2e, tokens, ok, aborted in _rows(samples):
        if sent > t:
            continue
        if aborted or (ok and e2e is not None and sent + e2e > t):
            first = ttft if ttft is not None and sent + ttft <= t else None
            out.append((cls, sent, first, None, tokens, False, True))
        else:
            out.append((cls, sent, ttft, e2e, tokens, ok, aborted))
    return _columns(out)


def emulate(
    slos: Sequence[SLOSpec],
    samples: Mapping[str, Sequence[Any]],
    length: StageLength,
    confidence: float = DEFAULT_CONFIDENCE,
) -> tuple[float, list[SLOVerdict]]:
    """A stored stage (at least `length.cap_s` long) run again under `length`'s rule: (where it
    would have stopped, its verdicts there, every request sent by then answered). Counted SLOs
    only: the others need the stage's metrics, which a cut stage does not have."""
    counted = [s for s in slos if count_limit(s) is not None]
    stop = length.cap_s
    for t in length.checkpoints():
        seen = slo_verdicts(
            counted, seen_at(samples, t), {}, end_s=t, confidence=confidence, looks=length.looks, scale=length.scale(t)
        )
        if stop_reason(seen, t, length) is not None:
            stop = t
            break
    final = slo_verdicts(counted, truncated(samples, stop), {}, confidence=confidence, looks=length.looks)
    return stop, final
