"""Does the screening agree with the confirmation? Per confirmed candidate and over studies.

Pure. The search phase screens each configuration with one short measurement; the confirmation
measures its candidates again, several runs each, on the full measurement. For every confirmed
candidate the two give a feasibility call (does it meet the SLOs at the target load) and a
capacity with an interval. They agree on feasibility when the calls are the same, and on the
capacity when the confirmation's capacity lies within the screening's interval (its bracket
where no interval was stored). Over a study, or several, the share of candidates that agree
comes with its exact (Clopper-Pearson) interval: three studies of five candidates say little
more than "most".

`shortest_agreeing` picks the screening length from measurements: given the agreement each
candidate length reached (for example by reading the confirmation's target stages cut at that
length, `benchmarks/bench_screening_length.py`), the shortest whose agreement is at least the target.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from objectives.slo_verdict import clopper_pearson

TARGET_SHARE = 0.90  # the screening must agree with the confirmation on at least this share
CONFIDENCE = 0.90


@dataclass(frozen=True)
class Call:
    """One side's call on a configuration: feasible at the target load, and its capacity (req/s)
    with an interval (None: not measured)."""

    feasible: bool | None
    capacity: float | None = None
    low: float | None = None
    high: float | None = None  # inf: censored (at least `low`)

    def contains(self, rps: float | None) -> bool | None:
        if rps is None or self.low is None or self.high is None or not math.isfinite(rps):
            return None
        return self.low * (1 - 1e-9) <= rps <= self.high * (1 + 1e-9)


@dataclass(frozen=True)
class CandidateAgreement:
    """One confirmed candidate: what the screening said beside what the confirmation says."""

    name: str  # the trial number or the baseline's name, as the report shows it
    screen: Call
    confirmed: Call

    @property
    def feasibility_agrees(self) -> bool | None:
        if self.screen.feasible is None or self.confirmed.feasible is None:
            return None
        return self.screen.feasible == self.confirmed.feasible

    @property
    def capacity_agrees(self) -> bool | None:
        """The confirmation's capacity within the screening's interval."""
        return self.screen.contains(self.confirmed.capacity)

    @property
    def capacity_ratio(self) -> float | None:
        """Screening's capacity over the confirmation's (None where either is 0 or unknown)."""
        s, c = self.screen.capacity, self.confirmed.capacity
        if s is None or c is None or not (s > 0 and c > 0) or not (math.isfinite(s) and math.isfinite(c)):
            return None
        return s / c


@dataclass(frozen=True)
class Share:
    """k of n agreed, with the exact interval of the share."""

    agreed: int
    of: int
    low: float
    high: float

    @property
    def value(self) -> float:
        return self.agreed / self.of if self.of else math.nan

    def text(self) -> str:
        if not self.of:
            return "no candidates"
        return f"{self.agreed} of {self.of} ({self.value:.0%} [{self.low:.0%}, {self.high:.0%}])"


def share(flags: Iterable[bool | None], confidence: float = CONFIDENCE) -> Share:
    known = [f for f in flags if f is not None]
    agreed = sum(1 for f in known if f)
    low, high = clopper_pearson(agreed, len(known), confidence)
    return Share(agreed, len(known), low, high)


@dataclass(frozen=True)
class Agreement:
    """Screening against confirmation over a set of candidates (one study or several)."""

    candidates: tuple[CandidateAgreement, ...]
    feasibility: Share
    capacity: Share
    median_ratio: float  # the screening's capacity over the confirmation's, median over candidates

    def meets(self, target: float = TARGET_SHARE) -> bool:
        """The observed share of feasibility calls that agree is at least `target`."""
        return self.feasibility.of > 0 and self.feasibility.value >= target

    def lines(self) -> list[str]:
        """The shares; the capacity's only where some candidate had a capacity to compare (a
        scenario without a capacity search has none)."""
        lines = [f"feasibility at the target: screening agrees with the confirmation on {self.feasibility.text()}"]
        if self.capacity.of > 0 or math.isfinite(self.median_ratio):
            ratio = f"{self.median_ratio:.2f}x" if math.isfinite(self.median_ratio) else "n/a"
            lines.append(
                f"capacity: the confirmation's within the screening's interval on {self.capacity.text()}; "
                f"screening / confirmation median {ratio}"
            )
        return lines


def agreement(candidates: Iterable[CandidateAgreement], confidence: float = CONFIDENCE) -> Agreement:
    rows = tuple(candidates)
    ratios = [r for r in (c.capacity_ratio for c in rows) if r is not None]
    return Agreement(
        rows,
        share((c.feasibility_agrees for c in rows), confidence),
        share((c.capacity_agrees for c in rows), confidence),
        float(statistics.median(ratios)) if ratios else math.nan,
    )


def pooled(studies: Iterable[Agreement], confidence: float = CONFIDENCE) -> Agreement:
    """Several studies' candidates as one set (the table over default studies)."""
    return agreement((c for a in studies for c in a.candidates), confidence)


def confirmed_call(feasible_runs: Sequence[bool | None], capacities: Sequence[float]) -> Call:
    """The confirmation's call from its runs where no pooled verdict is at hand: feasible when
    most runs were (a tie is not feasible), the capacity the runs' median within their range."""
    known = [f for f in feasible_runs if f is not None]
    feasible = (sum(known) > len(known) / 2) if known else None
    caps = [c for c in capacities if c is not None and math.isfinite(c)]
    if not caps:
        return Call(feasible)
    return Call(feasible, float(statistics.median(caps)), min(caps), max(caps))


def shortest_agreeing(by_length: Mapping[float, Agreement], target: float = TARGET_SHARE) -> float | None:
    """The shortest screening length whose feasibility calls agree on at least `target` of the
    candidates, where every longer length does too (None: none does). A length with no call
    (no stored stage long enough to emulate it) is no evidence either way and is left out."""
    lengths = sorted(k for k, a in by_length.items() if a.feasibility.of > 0)
    ok = [by_length[s].meets(target) for s in lengths]
    for i, length in enumerate(lengths):
        if all(ok[i:]):
            return length
    return None
