"""The stages' plan: the scenario's `capacity:` section (`CapacitySpec`), the size in requests it
gives every stage, what a single stage is held to (`stage_slos`), and one stage as planned
(`plan_stage`): its requests (a slice of the workload's sequence), its rate, how long that takes,
its time cap, and the stopping rule it runs under.

**A stage's size** is how many requests it holds: what its SLO verdicts need, not what a number of
seconds happens to hold on this machine.

A stage sized in seconds holds as many requests as the machine serves in that time, so the same
scenario decides its verdicts on 16 requests on a slow CPU and on 500 on a GPU: two different
measurements. Sized in requests, every machine measures the same sample and only the time
differs.

The size comes from the verdict rule itself (`objectives.slo_verdict`): an SLO on a percentile
allows a share L of its class's requests over the bound (5% for a p95), and a stage calls it by
the exact (Clopper-Pearson) interval of the share it counts, at the scenario's confidence with
the stage's looks' correction. The stage is made large enough that the rule decides when the
true share over the bound is L / r (met) and when it is r x L (violated), r being the scenario's
`capacity.resolution` (2 by default: half, or twice, the allowed share), at the expected count
(n x the share, the interval's ends continuous in it). That is a count of the SLO's class; the
stage holds it over the class's weight. SLOs with no count form (means, ITL) and the error rate
(a 1% bound at half would need thousands of requests, where a healthy server fails none) do
not size a stage; a stage holds at least `MIN_STAGE_REQUESTS`.

    p95, confidence 90%, 3 looks, resolution 2: 299 requests of the class
    p95, ..., resolution 4: 119;  p99, ..., resolution 2: 1,646

**One stage as planned.** Every stage holds the requests its verdicts need (`stage_size`), whatever
the rate: at a low rate it takes longer, never holds fewer. Its requests are stage k's own slice of
the workload's one long seeded sequence (`STAGE_STRIDE` apart), so stage k sends the same requests
in every trial (common random numbers) and no two stages replay the same prefix; the target
stage's slice starts at the sequence's start, so a confirmation's longer target stage sends the
screening's requests and then more of the same sequence. A burst arrival process's stage spans whole cycles of it.

Under the decided rule a stage is planned to its cap (`extend_to` x its requests) and looked at
in slices of its planned length (`slo_verdict.StageLength`); the workload's `duration_s` caps its
sending time, and a stage whose requests do not fit it is **capped**: its verdict says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from scipy import stats

from loadgen import MetricName, WorkloadSpec
from objectives import capacity as cap
from objectives.capacity import CAPACITY_KEYS
from objectives.early_abort import CERTAIN, DECIDED, OFF
from objectives.scoring import SLOSpec
from objectives.slo_verdict import DEFAULT_CONFIDENCE, StageLength, count_limit, look_confidence

DEFAULT_RESOLUTION = 2.0
# Below this many requests a stage measures nothing worth bisecting on.
MIN_STAGE_REQUESTS = 10
_MOST_REQUESTS = 1_000_000
TARGET, CAPACITY = "target", "capacity"  # a stage's kind: the first stage, then the search's
# Stage k's requests start at k x this in the workload's sequence: far enough apart that no
# stage of any length reaches the next one's slice.
STAGE_STRIDE = 1 << 20


def _decides(n: int, limit: float, resolution: float, confidence: float) -> bool:
    """Whether the verdict's interval, at the expected counts of n requests, calls a share of
    limit / resolution met and one of limit x resolution violated."""
    alpha = 1.0 - confidence
    low_share, high_share = limit / resolution, min(1.0, limit * resolution)
    k_met, k_violated = n * low_share, n * high_share
    upper = 1.0 if k_met >= n else float(stats.beta.ppf(1 - alpha / 2, k_met + 1, n - k_met))
    lower = 0.0 if k_violated <= 0 else float(stats.beta.ppf(alpha / 2, k_violated, n - k_violated + 1))
    return upper <= limit and lower > limit


@lru_cache(maxsize=256)
def class_requests_needed(limit: float, resolution: float, confidence: float) -> int:
    """The fewest requests of an SLO's class that decide it both ways at `resolution` (see the
    module docstring); `confidence` is each look's two-sided confidence."""
    if not 0 < limit < 1:
        raise ValueError(f"an SLO's allowed share must lie in (0, 1), got {limit}")
    hi = 1
    while not _decides(hi, limit, resolution, confidence):
        hi *= 2
        if hi > _MOST_REQUESTS:
            raise ValueError(
                f"no stage of up to {_MOST_REQUESTS} requests decides a share of {limit:g} at {resolution:g}x"
            )
    lo = hi // 2  # the rule only gets easier to satisfy as n grows at fixed shares: bisect
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _decides(mid, limit, resolution, confidence) else (mid, hi)
    return hi


@dataclass(frozen=True)
class SLOSize:
    """What one SLO asks of a stage."""

    slo: str  # its metric (the size does not depend on the bound)
    class_name: str | None  # None: every class
    limit: float
    class_requests: int  # of its class
    share: float  # its class's share of the workload
    requests: int  # the stage's requests that hold class_requests of its class


@dataclass(frozen=True)
class StageSize:
    """A stage's size in requests and the SLOs it came from (the largest need binds): `requests`
    planned, run on to `most` while an SLO is undecided (the decided rule; `most` is what decides
    at the resolution)."""

    requests: int
    most: int
    by_slo: tuple[SLOSize, ...] = ()
    resolution: float = DEFAULT_RESOLUTION
    given: bool = False  # set by the scenario (workload.num_requests), not from the SLOs

    @property
    def binding(self) -> SLOSize | None:
        return max(self.by_slo, key=lambda s: s.requests, default=None)

    def text(self) -> str:
        run_on = f", run on to {self.most} while undecided" if self.most > self.requests else ""
        if self.given:
            return f"{self.requests} requests a stage (workload.num_requests){run_on}"
        b = self.binding
        if b is None:
            return f"{self.requests} requests a stage{run_on} (no SLO on a percentile to size it by)"
        held = f"its {b.class_requests} {b.class_name} requests" if b.class_name else f"its {b.class_requests} requests"
        return (
            f"{self.requests} requests a stage{run_on}: at {self.most}, {held} decide {b.slo} when "
            f"{_pct(b.limit / self.resolution)} or {_pct(min(1.0, b.limit * self.resolution))} of them exceed "
            f"its bound (it allows {_pct(b.limit)})"
        )


def _pct(share: float) -> str:
    return f"{share * 100:.3g}%"


def stage_size(
    slos: Sequence[SLOSpec[Any]],  # only their metrics and percentiles are read: bounds may be relative
    shares: Mapping[str, float],
    *,
    confidence: float,
    looks: int,
    extend_to: float = 1.0,
    resolution: float = DEFAULT_RESOLUTION,
    given: int | None = None,
) -> StageSize:
    """A stage's size: `given` requests (the scenario's own), or what the percentile SLOs need
    at its cap (the module docstring), planned at the cap's 1 / `extend_to` (a stage runs on to
    its cap only while undecided). `shares`: each class's share of the workload's requests."""
    if given is not None:
        return StageSize(given, math.ceil(given * extend_to), (), resolution, given=True)
    total = sum(shares.values())
    per_look = look_confidence(confidence, looks)
    sizes = []
    for slo in slos:
        limit = count_limit(slo)
        name = MetricName.parse(slo.metric)
        if limit is None or name.base == "error_rate":
            continue
        share = shares[name.cls] / total if name.cls is not None else 1.0
        need = class_requests_needed(limit, resolution, per_look)
        sizes.append(SLOSize(slo.metric, name.cls, limit, need, share, math.ceil(need / share)))
    most = max([MIN_STAGE_REQUESTS, *(s.requests for s in sizes)])
    planned = max(MIN_STAGE_REQUESTS, math.ceil(most / extend_to))
    return StageSize(planned, max(most, planned), tuple(sizes), resolution)


class CapacitySpec(BaseModel):
    """A scenario's `capacity:` section: how far a trial searches for its capacity under the SLO,
    and how large its stages are.

    Every stage (the target and each capacity stage) holds the same number of requests, sized
    from the SLO verdicts' needs at `resolution` (`stage_size`), or the workload's
    own `num_requests`; the workload's `duration_s` caps each stage's sending time."""

    model_config = ConfigDict(extra="forbid")

    resolution: float = Field(
        DEFAULT_RESOLUTION,
        gt=1,
        description=(
            "a stage holds enough requests to decide a percentile SLO when the share over its bound is "
            "1/resolution or resolution times the allowed share"
        ),
    )
    max_stages: int = Field(5, ge=1, le=12, description="capacity stages after the target stage")
    precision: float = Field(0.1, gt=0, lt=1, description="stop when high / low - 1 is at most this")
    step: float = Field(2.0, gt=1, description="bracketing factor from the target rate")
    early_abort: Literal["decided", "likely", "certain", "off"] = Field(
        "decided",
        description=(
            "stop a stage once its SLO verdict is decided and run it on while it is not (decided), once it is "
            "95% likely (likely), certain (certain), or never (off)"
        ),
    )
    confidence: float = Field(
        DEFAULT_CONFIDENCE, gt=0.5, lt=1, description="two-sided confidence of the stage verdicts and the capacity fit"
    )
    # 1.5: a stage near its bound runs on to what its verdict needs with the looks' correction
    # (`stage_size`: the cap, not the planned end, decides at `resolution`), one far from it stops at
    # its planned end.
    extend_to: float = Field(
        1.5, ge=1, le=10, description="with decided: the longest an undecided stage runs, x its planned requests"
    )
    look_every: float = Field(
        0.5, gt=0, le=1, description="with decided: how often a stage's verdict is looked at, x its planned length"
    )
    idle_timeout_s: float = Field(60.0, gt=0, description="longest wait for the server to drain")
    floor_fraction: float = Field(
        0.25,
        gt=0,
        lt=1,
        description=(
            "the lowest rate searched, as a fraction of the target rate: a config that misses the SLO "
            "there has capacity 0"
        ),
    )
    signal_steps: bool = Field(
        True,
        description=(
            "step up from a passing stage by what its SLO margin says (objectives.capacity.signal_factor) "
            "instead of by `step`"
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _sized_in_requests(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for gone in ("stage_s", "max_stage_s"):
                if gone in data:
                    raise ValueError(
                        f"{gone}: stages are sized in requests, not seconds: each holds what its SLO verdicts "
                        "need (capacity.resolution) or workload.num_requests, and workload.duration_s caps "
                        'its time (docs/scenarios.md, "Stage sizes")'
                    )
        return data

    @field_validator("early_abort", mode="before")
    @classmethod
    def _early_abort_words(cls, value: Any) -> Any:
        # true/false were the field's values before the likely rule: true meant the certain rule,
        # which an older scenario (and a stored study read again) keeps.
        if value is True or value == "true":
            return CERTAIN
        if value is False or value == "false":
            return OFF
        return value

    @property
    def looks(self) -> int:
        """How many times the decided rule looks at a stage (`slo_verdict.StageLength.looks`)."""
        return max(1, math.ceil(self.extend_to / self.look_every - 1e-9))

    def size(self, workload: WorkloadSpec, slos: Sequence[SLOSpec[Any]]) -> StageSize:
        """How many requests every stage of this scenario holds (`stage_size`): the
        workload's `num_requests`, or enough that a stage's cap decides its percentile SLOs at
        `resolution` under the verdict rule with its looks (without the decided rule a stage
        does not run on: its planned end decides, at one look)."""
        decided = self.early_abort == DECIDED
        return stage_size(
            stage_slos(slos),
            {c.name: c.weight for c in workload.classes},
            confidence=self.confidence,
            looks=self.looks if decided else 1,
            extend_to=self.extend_to if decided else 1.0,
            resolution=self.resolution,
            given=workload.num_requests,
        )

    def floor(self, target_rate: float | None, cap_s: float | None = None) -> float:
        """The lowest rate the search measures (req/s): `floor_fraction` of the target rate, and
        never below the rate at which a stage of `cap_s` seconds holds MIN_STAGE_REQUESTS."""
        lowest = MIN_STAGE_REQUESTS / cap_s if cap_s else 0.0
        return max(self.floor_fraction * target_rate, lowest) if target_rate else lowest

    def length(self, planned_s: float) -> StageLength:
        """A stage of `planned_s` seconds under the decided rule: its cap and its looks."""
        return StageLength(planned_s, planned_s * self.extend_to, planned_s * self.look_every)

    def search_settings(self, target_rate: float | None = None, cap_s: float | None = None) -> cap.SearchSettings:
        return cap.SearchSettings(
            step=self.step,
            precision=self.precision,
            max_stages=self.max_stages,
            min_rate=self.floor(target_rate, cap_s),
            signal_steps=self.signal_steps,
        )


# An SLO with numeric bounds, or one whose bounds may still be relative (the scenario's, unresolved).
AnySLO = TypeVar("AnySLO", bound="SLOSpec[Any]")


def stage_slos(slos: Sequence[AnySLO]) -> list[AnySLO]:
    """The SLOs a single stage is held to: all but those on the trial's capacity itself."""
    return [s for s in slos if s.metric not in CAPACITY_KEYS]


@dataclass(frozen=True)
class PlannedStage:
    index: int
    rate: float  # mean offered requests/s
    requests: int  # planned (the decided rule may run it on past them while undecided)
    nominal_s: float  # the time its planned requests take at its rate (whole cycles for bursts)
    cap_s: float | None  # the workload's time cap (duration_s); None: none
    length: StageLength | None  # the decided rule's planned length, cap and looks; None: runs as planned
    rule: str  # the stopping rule it runs under
    workload: WorkloadSpec  # what `run_load` sends

    @property
    def kind(self) -> str:
        return TARGET if self.index == 0 else CAPACITY

    @property
    def first_request(self) -> int:
        return self.workload.first_request

    @property
    def capped(self) -> bool:
        """Its planned requests take longer than the time cap allows."""
        return self.cap_s is not None and self.nominal_s > self.cap_s + 1e-9

    def cap_note(self, sent: int) -> str | None:
        """What the verdict says of a stage the time cap cut: how much of its plan it held."""
        if self.cap_s is None or sent >= self.requests:
            return None
        return (
            f"capped: stopped by its time cap of {self.cap_s:.0f} s (workload.duration_s) after {sent} of its "
            f"{self.requests} planned requests ({self.nominal_s:.0f} s at {self.rate:.3g} req/s)"
        )


def cycle_s(workload: WorkloadSpec) -> float | None:
    """The arrival process's own cycle (s), which a stage spans whole: a burst's period."""
    return workload.arrival.period_s if workload.arrival.mode == "burst" else None


def at_rate(workload: WorkloadSpec, rate: float, **update) -> WorkloadSpec:
    """The workload's arrival process at another mean rate, its other fields as `update` says."""
    arrival = workload.arrival
    mean = arrival.mean_rate()
    if arrival.rate is None or not mean:
        raise ValueError("a load stage at another rate needs an open-loop workload with a resolved rate")
    scaled = arrival.model_copy(update={"rate": arrival.rate * rate / mean})
    return workload.model_copy(update={"arrival": scaled, **update})


def plan_stage(
    workload: WorkloadSpec,
    spec: CapacitySpec,
    requests: int,
    index: int,
    rate: float,
    *,
    stoppable: bool,
) -> PlannedStage:
    """Stage `index` at `rate`: `requests` of its slice (see the module docstring). `stoppable`:
    whether its verdict may stop it (not the confirmation's target stage, which runs in full)."""
    cap_s = workload.duration_s
    cycle = cycle_s(workload)
    nominal_s = requests / rate
    if cycle is not None:  # whole cycles of the burst process, enough for the requests on average
        nominal_s = cycle * math.ceil(nominal_s / cycle - 1e-9)
        if cap_s is not None and nominal_s > cap_s:
            cap_s = max(cycle, cycle * math.floor(cap_s / cycle + 1e-9))
    decided = stoppable and spec.early_abort == DECIDED
    planned_s = min(nominal_s, cap_s) if cap_s is not None else nominal_s
    length = spec.length(planned_s) if decided else None
    sending_s = length.cap_s if length is not None else planned_s
    if cap_s is not None:
        sending_s = min(sending_s, cap_s)
        if length is not None:
            length = StageLength(length.nominal_s, sending_s, length.slice_s)
    most = math.ceil(requests * (spec.extend_to if decided else 1.0) - 1e-9)
    stage = at_rate(
        workload,
        rate,
        # a burst's stage is bounded by its whole cycles; any other by its requests, then its cap
        num_requests=None if cycle is not None else most,
        duration_s=sending_s if cycle is not None or cap_s is not None else None,
        first_request=index * STAGE_STRIDE,
        warmup_requests=workload.warmup_requests if index == 0 else 0,
    )
    rule = spec.early_abort if stoppable else CERTAIN
    return PlannedStage(index, rate, requests, nominal_s, cap_s, length, rule, stage)
