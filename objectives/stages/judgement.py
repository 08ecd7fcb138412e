"""One stage judged from what its load run measured (`judged_stage`): its SLO verdicts from its
requests' counts, whether it ended steady, whether the requests it counted hold its class mix, and
what an early stop or its time cap cut; what it gives, a `StageResult`. Pure: the stage loop
(`search.executor.staged_load`) calls it on each stage's `loadgen.LoadResult`.

Beside its SLOs' verdicts, two checks a stage's verdict passes before it may say "met":

**Steady state.** An open loop above a server's capacity never settles: its queue and every new
request's wait for a first token grow for as long as it runs. A stage that ends while they are
still growing has measured how far the backlog got in the time it had, not the server: on a
short stage the requests over a TTFT bound can still be few, and the stage would read "met" at a
rate the server cannot hold. So at its end every stage is judged over its window (after the first
`SETTLE_SHARE` of it, at most `saturation.settle_s`, 5 s or 10 arrivals: a stage starts on an
empty server, whose queue fills to its level at any rate near capacity):

* the first-token lag: each request's TTFT against its send time (a request without a first token
  enters with its wait so far, a lower bound), least squares;
* the waiting queue: the server's `vllm:num_requests_waiting` samples against time.

Either one climbing at one-sided p < `saturation.SATURATION_P` by at least the rate of a 5%
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
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from loadgen import Abort, GaugeSample, LoadResult, request_samples
from objectives import capacity as cap
from objectives.saturation import QUEUE_MIN_DEPTH, SATURATION_MIN_SLOPE, Trend, settle_s, trend
from objectives.scoring import SLOSpec, slo_key
from objectives.slo_verdict import (
    DEFAULT_CONFIDENCE,
    SLOVerdict,
    Verdict,
    slo_verdicts,
    stage_passed,
    stage_verdict,
)
from objectives.stages.plan import PlannedStage

STEADY_STATE = "steady_state"
CLASS_MIX = "class_mix"
SETTLE_SHARE = 0.25  # of a stage's sending window, at most `saturation.settle_s`, left out as its fill
MIN_POINTS = 6  # fewer requests or gauge samples in the window say nothing either way


@dataclass
class StageResult:
    """One stage as judged (`judged_stage`): what its load run measured, its verdicts and what cut it."""

    index: int
    kind: str  # TARGET or CAPACITY (`plan`)
    rate: float  # offered requests/s (mean)
    planned_s: float  # the schedule's length
    elapsed_s: float  # start of sending to the last response (or to the abort)
    margin: float  # worst normalized SLO violation (aborted: a lower bound); NaN: not known
    violations: dict[str, float]
    metrics: dict[str, float]
    server_diagnostics: dict[str, float]
    aborted: str | None = None
    idle_wait_s: float = 0.0  # drain before this stage
    prefix_cache_reset: bool | None = None  # None: not attempted (first stage) or not available
    requests_planned: int = 0
    requests_sent: int = 0
    notes: list[str] = field(default_factory=list)
    samples: dict[str, list] | None = None  # the measured requests (loadgen.request_samples)
    stopped_passing: bool = False  # `aborted` says why: every SLO very likely met
    raised: str | None = None  # the metric an abort raised to its certain lower bound (an "at least")
    # per SLO (objectives.slo_verdict), then the stage's steady state and class mix as two more
    # (`steady_state`, `class_mix`: `steady_state`, `class_mix` below); []: not kept
    verdicts: list[SLOVerdict] = field(default_factory=list)
    stage_requests: int = 0  # its planned size (`plan.stage_size`); 0: sized in seconds
    first_request: int = 0  # where its slice starts in the workload's sequence
    capped: str | None = None  # what its time cap cut, where it did
    steady: SteadyState | None = None  # the evidence behind the `steady_state` verdict
    mix: ClassMix | None = None  # ... behind the `class_mix` verdict

    @property
    def missed(self) -> bool:
        """Cut short because an SLO was (certainly, likely or decidedly) missed."""
        return self.aborted is not None and not self.stopped_passing

    @property
    def passed(self) -> bool:
        """Its verdict's leaning where it has verdicts, else its margin; never a cut-short miss."""
        if self.missed:
            return False
        return stage_passed(self.verdicts) if self.verdicts else self.margin <= 0

    @property
    def verdict(self) -> str | None:
        """met, violated or undecided (objectives.slo_verdict); None for a stage without verdicts."""
        return stage_verdict(self.verdicts) if self.verdicts else None

    @property
    def steady_ok(self) -> bool:
        """Ended in a steady state (or has no evidence either way: a stage without requests)."""
        return self.steady is None or self.steady.steady

    @property
    def class_counts(self) -> dict[str, int]:
        """The requests it sent, by class."""
        if self.mix is not None:
            return dict(self.mix.sent)
        counts: dict[str, int] = {}
        for c in (self.samples or {}).get("class", []):
            counts[c] = counts.get(c, 0) + 1
        return counts

    @property
    def saved_s(self) -> float:
        """Sending time an early abort saved."""
        return max(0.0, self.planned_s - self.elapsed_s) if self.aborted else 0.0

    @property
    def probe(self) -> cap.Probe:
        """An aborted stage's margin is only a lower bound, and a loose one (the abort fires the
        moment the miss is certain, when it is barely over): interpolating on it would put the
        capacity at the failing rate. It enters the search as failing by an unknown margin, and
        the capacity is then the passing rate below it (`capacity.interpolate`)."""
        return cap.Probe(self.rate, math.nan if self.missed else self.margin, self.passed if self.verdicts else None)

    def verdict_line(self) -> str:
        """`met` or `undecided, leaning met: ttft_p95_ms@short<=412: 1 of 21 over (...)`: the stage's
        verdict and the SLOs that are not plainly met."""
        if not self.verdicts:
            return "met" if self.passed else "violated"
        shown = [v.text() for v in self.verdicts if v.verdict != "met" or v.basis == "share"]
        lean = f", leaning {'met' if self.passed else 'violated'}" if self.verdict == "undecided" else ""
        if not shown:
            return "met every SLO" if self.verdict == "met" else f"{self.verdict}{lean}"
        return f"{self.verdict}{lean}: {'; '.join(shown)}"

    def describe(self) -> str:
        head = f"{self.kind} stage at {self.rate:.3g} req/s"
        if self.verdicts:
            stopped = f" (stopped after {self.elapsed_s:.0f} s: {self.aborted})" if self.aborted else ""
            return f"{head}: {self.verdict_line()}{stopped}"
        if self.aborted and self.passed:
            return f"{head}: met every SLO (stopped after {self.elapsed_s:.0f} s: {self.aborted})"
        if self.aborted:
            return f"{head}: violated (aborted after {self.elapsed_s:.0f} s: {self.aborted})"
        if self.passed:
            return f"{head}: met every SLO (margin {-self.margin:.0%})"
        return f"{head}: violated ({', '.join(self.violations)})"


def judged_stage(
    planned: PlannedStage,
    result: LoadResult,
    held: Sequence[SLOSpec],
    confidence: float,
    notes: list[str],
    idle_s: float = 0.0,
    reset: bool | None = None,
) -> StageResult:
    """What a stage measured, judged: its SLO verdicts from its counts, whether it ended steady,
    whether the requests it counted hold its mix, and what its time cap cut."""
    flat = result.flat_metrics()
    notes = list(notes)
    abort = _undecided_abort(planned, result, notes)
    stopped_passing = abort is not None and abort.passed
    raised = _raise_stopping_metric(flat, abort)
    worst, violated = margin(flat, held)
    if abort is not None and not stopped_passing:  # a miss: by at least the abort's bound
        known = [m for m in (worst, abort.margin) if math.isfinite(m) and m > 0]
        worst = max(known) if known else math.nan
    samples = request_samples(result.records, result.start) if result.records else None
    every = {slo_key(x): x.violation(flat.get(x.metric, math.nan)) for x in held}
    length = planned.length
    verdicts = slo_verdicts(
        held,
        samples,
        every,
        end_s=result.duration_s,
        confidence=confidence,
        looks=length.looks if length is not None else 1,
    )
    steady = mix = None
    if samples is not None:
        steady, mix = _steady_and_mix(planned, result, samples, confidence)
        verdicts += [steady.verdict(), mix.verdict()]
        if not steady.steady:
            notes.append(steady.reason)
        if not mix.representative:
            notes.append(f"the requests counted do not hold the stage's mix: {mix.text()}")
    capped = planned.cap_note(len(result.records)) if planned.capped else None
    if capped:
        notes.append(capped)
    return StageResult(
        index=planned.index,
        kind=planned.kind,
        rate=planned.rate,
        planned_s=length.nominal_s if length is not None else result.planned_s,
        elapsed_s=result.duration_s,
        margin=worst,
        violations=violated,
        metrics=flat,
        server_diagnostics=result.server_diagnostics(),
        aborted=abort.reason if abort is not None else None,
        idle_wait_s=idle_s,
        prefix_cache_reset=reset,
        requests_planned=result.requests_planned,
        requests_sent=len(result.records),
        notes=notes + result.notes,
        samples=samples,
        stopped_passing=stopped_passing,
        raised=raised,
        verdicts=verdicts,
        stage_requests=planned.requests,
        first_request=planned.first_request,
        capped=capped,
        steady=steady,
        mix=mix,
    )


def margin(flat: dict[str, float], slos: Sequence[SLOSpec]) -> tuple[float, dict[str, float]]:
    """(worst normalized violation, the violated SLOs): <= 0 means every SLO was met."""
    violations = {slo_key(s): s.violation(flat.get(s.metric, math.nan)) for s in slos}
    worst = max(violations.values(), default=-math.inf)
    return worst, {k: v for k, v in violations.items() if v > 0}


def _undecided_abort(planned: PlannedStage, result: LoadResult, notes: list[str]) -> Abort | None:
    """The stop that cut the stage short, None where it ran as planned; appends to `notes` what
    its planned length says of how it ended."""
    abort, length = result.abort, planned.length
    if abort is not None and abort.drain:  # decided: the stage ended as one planned to end there
        notes += [abort.reason] if length is not None and result.duration_s > length.nominal_s else []
        return None
    if length is not None and result.abort is None and len(result.records) > planned.requests:
        notes.append(f"ran to its cap of {length.cap_s:.0f} s, undecided at every look")
    return abort


def _raise_stopping_metric(flat: dict[str, float], abort: Abort | None) -> str | None:
    """The metric that stopped the stage, raised in `flat` to what was certain (the cut-short
    requests are left out of the partial numbers, so it would look better than it was): its
    name where raised; a NaN where failed requests reach it (unknown, never a number)."""
    if abort is None or abort.metric is None:
        return None
    partial = flat.get(abort.metric, math.nan)
    if math.isnan(abort.value):
        flat[abort.metric] = math.nan
    elif not partial >= abort.value:
        flat[abort.metric] = abort.value
        return abort.metric
    return None


def _steady_and_mix(
    planned: PlannedStage, result: LoadResult, samples: Mapping[str, Sequence[Any]], confidence: float
) -> tuple[SteadyState, ClassMix]:
    """Whether the stage ended steady, and whether the requests it counted hold its class mix."""
    sending_s = max(samples["sent_s"], default=0.0)
    steady = steady_state(
        samples, result.gauges, start=result.start, sending_s=sending_s, end_s=result.duration_s, rate=planned.rate
    )
    return steady, class_mix(samples, confidence)


# --- the steady state and the class mix (the module docstring) ------------------------------------


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
    lag = trend(np.array(x, dtype=float), np.array(y, dtype=float), MIN_POINTS)
    waiting = [(g.t - start, g.waiting) for g in gauges if settle <= g.t - start <= end_s and not math.isnan(g.waiting)]
    queue = None
    if waiting:
        t, depth = (np.array(v, dtype=float) for v in zip(*waiting))
        queue = trend(t, depth, MIN_POINTS)
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
