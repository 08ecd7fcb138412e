"""What a load stage measured, and what a run of stages says (its metrics and capacity)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from loadgen import LoadResult
from objectives import capacity as cap
from objectives.capacity import SLO_CAPACITY_RPS, TARGET_ABORTED
from objectives.slo_verdict import SLOVerdict, stage_passed, stage_verdict
from objectives.stages.steady import ClassMix, SteadyState

TARGET, CAPACITY = "target", "capacity"


@dataclass
class StageResult:
    index: int
    kind: str  # TARGET or CAPACITY
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
    # (`steady_state`, `class_mix`: objectives.stages.steady); []: not kept
    verdicts: list[SLOVerdict] = field(default_factory=list)
    stage_requests: int = 0  # its planned size (objectives.stages.capacity_spec); 0: sized in seconds
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


@dataclass
class StagedRun:
    stages: list[StageResult]
    target: LoadResult
    capacity: cap.CapacityEstimate | None

    def metrics(self) -> dict[str, float]:
        """The target stage's metrics, with the capacity metrics when a search ran."""
        out = dict(self.stages[0].metrics)
        out[TARGET_ABORTED] = 1.0 if self.stages[0].aborted else 0.0
        if self.capacity is not None:
            out.update(capacity_metrics(self.capacity, self.stages))
        return out


def capacity_metrics(estimate: cap.CapacityEstimate, stages: Sequence[StageResult]) -> dict[str, float]:
    low = next((s for s in stages if s.passed and s.rate == estimate.low), None)
    out = {SLO_CAPACITY_RPS: estimate.rps}
    for key, source in (
        ("slo_capacity_output_throughput", "output_throughput"),
        ("slo_capacity_total_token_throughput", "total_token_throughput"),
        ("slo_capacity_goodput", "goodput"),
    ):
        value = low.metrics.get(source, math.nan) if low is not None else 0.0
        out[key] = cap.at_capacity(estimate.low, value, estimate.rps)
    return out
