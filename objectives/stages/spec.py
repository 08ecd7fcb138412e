"""A scenario's `capacity:` section, and what a single stage is held to."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from objectives import capacity as cap
from objectives.capacity import CAPACITY_KEYS
from objectives.early_abort import CERTAIN, OFF
from objectives.scoring import SLOSpec, slo_key
from objectives.slo_verdict import DEFAULT_CONFIDENCE, StageLength

# Below this many requests a stage measures nothing worth bisecting on: no floor goes below the
# rate that gives a stage of `max_stage_s` this many.
MIN_STAGE_REQUESTS = 10


class CapacitySpec(BaseModel):
    """A scenario's `capacity:` section: how far a trial searches for its capacity under the SLO."""

    model_config = ConfigDict(extra="forbid")

    stage_s: float = Field(15.0, gt=0, description="sending window of each capacity stage (s)")
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
    # 1.5: a stage of the target's size that met everything can still be called met by then (at
    # mixed's CPU rates 0 of 115 requests over, not 0 of 77), one of a capacity stage's size is
    # not held open for nothing (docs/measurement.md, "A stage's length").
    extend_to: float = Field(
        1.5, ge=1, le=10, description="with decided: the longest an undecided stage runs, x its planned length"
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
    max_stage_s: float | None = Field(
        None,
        gt=0,
        description=(
            "the longest a stage below the target rate is lengthened to (s); default stage_s / floor_fraction, "
            "so every stage down to the floor holds as many requests as one at the target rate"
        ),
    )
    signal_steps: bool = Field(
        True,
        description=(
            "step up from a passing stage by what its SLO margin says (objectives.capacity.signal_factor) "
            "instead of by `step`"
        ),
    )

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

    @model_validator(mode="after")
    def _longest_stage(self) -> CapacitySpec:
        if self.max_stage_s is not None and self.max_stage_s < self.stage_s:
            raise ValueError(f"max_stage_s ({self.max_stage_s:g}) must be at least stage_s ({self.stage_s:g})")
        return self

    @property
    def longest_stage_s(self) -> float:
        return self.max_stage_s if self.max_stage_s is not None else self.stage_s / self.floor_fraction

    def stage_seconds(self, rate: float, target_rate: float | None) -> float:
        """A capacity stage's sending window: `stage_s`, lengthened below the target rate to hold
        `stage_s` x `target_rate` requests, within `longest_stage_s`."""
        if not target_rate or rate >= target_rate:
            return self.stage_s
        return min(self.longest_stage_s, self.stage_s * target_rate / rate)

    def floor(self, target_rate: float | None) -> float:
        """The lowest rate the search measures (req/s). Without a target rate, stages are not
        lengthened and the floor is where a `stage_s` stage holds MIN_STAGE_REQUESTS."""
        if not target_rate:
            return MIN_STAGE_REQUESTS / self.stage_s
        return max(self.floor_fraction * target_rate, MIN_STAGE_REQUESTS / self.longest_stage_s)

    def length(self, planned_s: float) -> StageLength:
        """A stage of `planned_s` seconds under the decided rule: its cap and its looks."""
        return StageLength(planned_s, planned_s * self.extend_to, planned_s * self.look_every)

    def search_settings(self, target_rate: float | None = None) -> cap.SearchSettings:
        return cap.SearchSettings(
            step=self.step,
            precision=self.precision,
            max_stages=self.max_stages,
            min_rate=self.floor(target_rate),
            signal_steps=self.signal_steps,
        )


def stage_slos(slos: Sequence[SLOSpec]) -> list[SLOSpec]:
    """The SLOs a single stage is held to: all but those on the trial's capacity itself."""
    return [s for s in slos if s.metric not in CAPACITY_KEYS]


def margin(flat: dict[str, float], slos: Sequence[SLOSpec]) -> tuple[float, dict[str, float]]:
    """(worst normalized violation, the violated SLOs): <= 0 means every SLO was met."""
    violations = {slo_key(s): s.violation(flat.get(s.metric, math.nan)) for s in slos}
    worst = max(violations.values(), default=-math.inf)
    return worst, {k: v for k, v in violations.items() if v > 0}
