"""A scenario's `capacity:` section, a stage's size from it, and what a single stage is held to."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from loadgen import WorkloadSpec
from objectives import capacity as cap
from objectives.capacity import CAPACITY_KEYS
from objectives.early_abort import CERTAIN, DECIDED, OFF
from objectives.scoring import SLOSpec, slo_key
from objectives.slo_verdict import DEFAULT_CONFIDENCE, StageLength
from objectives.stages.sizing import DEFAULT_RESOLUTION, MIN_STAGE_REQUESTS, StageSize, stage_size


class CapacitySpec(BaseModel):
    """A scenario's `capacity:` section: how far a trial searches for its capacity under the SLO,
    and how large its stages are.

    Every stage (the target and each capacity stage) holds the same number of requests, sized
    from the SLO verdicts' needs at `resolution` (`objectives.stages.sizing`), or the workload's
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
    # (`sizing`: the cap, not the planned end, decides at `resolution`), one far from it stops at
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
        """How many requests every stage of this scenario holds (`sizing.stage_size`): the
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


def margin(flat: dict[str, float], slos: Sequence[SLOSpec]) -> tuple[float, dict[str, float]]:
    """(worst normalized violation, the violated SLOs): <= 0 means every SLO was met."""
    violations = {slo_key(s): s.violation(flat.get(s.metric, math.nan)) for s in slos}
    worst = max(violations.values(), default=-math.inf)
    return worst, {k: v for k, v in violations.items() if v > 0}
