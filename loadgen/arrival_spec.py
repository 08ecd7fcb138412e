"""When requests are sent (`ArrivalSpec`): an open loop at a rate (Poisson, gamma, constant, bursts)
or a closed loop of concurrent users; a rate may be a fraction of measured capacity until the study
resolves it. `arrivals` turns a spec into send times."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ArrivalMode = Literal["poisson", "gamma", "constant", "burst", "trace", "closed"]


class UnresolvedRateError(ValueError):
    """A rate given as a fraction of capacity that was never turned into requests/s."""


class ArrivalSpec(BaseModel):
    """When requests are sent.

    Open loop (`poisson`, `gamma`, `constant`, `burst`, `trace`): at `rate` requests/s, whatever the
    server does. `gamma` gaps have shape `burstiness` (1 = Poisson, < 1 burstier, > 1
    smoother), as `vllm bench serve --burstiness`. `burst`: Poisson at `rate`, with
    `peak_multiplier` x `rate` for the first `duty` of every `period_s`. `trace`: the gaps of
    the workload's trace, scaled so that their mean rate is `rate` (`loadgen.trace.replay_plan`).
    Closed loop (`closed`): `concurrency` users, each sending its next request when the last
    one finished.
    A rate may be given as `capacity_fraction` of measured capacity instead; the study turns
    it into `rate` with `resolve()` before a run.
    """

    model_config = ConfigDict(extra="forbid")

    mode: ArrivalMode = "poisson"
    rate: float | None = Field(None, gt=0, description="requests/s (burst: the baseline)")
    capacity_fraction: float | None = Field(None, gt=0, description="rate as a fraction of capacity")
    burstiness: float = Field(1.0, gt=0, description="gamma: shape of the gaps")
    peak_multiplier: float = Field(4.0, gt=1, description="burst: peak rate / baseline rate")
    period_s: float = Field(10.0, gt=0, description="burst: one baseline+peak cycle")
    duty: float = Field(0.2, gt=0, lt=1, description="burst: share of each period at the peak")
    concurrency: int | None = Field(None, ge=1, description="closed: number of users")

    @model_validator(mode="after")
    def _check(self) -> ArrivalSpec:
        if self.mode == "closed":
            if self.concurrency is None:
                raise ValueError("mode=closed needs concurrency")
            bad = [f for f in ("rate", "capacity_fraction") if getattr(self, f) is not None]
            if bad:
                raise ValueError(f"mode=closed takes concurrency, not {', '.join(bad)}")
        else:
            if (self.rate is None) == (self.capacity_fraction is None):
                raise ValueError(f"mode={self.mode} needs exactly one of rate, capacity_fraction")
            if self.concurrency is not None:
                raise ValueError(f"concurrency applies to mode=closed only (mode={self.mode})")
        # Compared with the defaults, not with what was given, so a dumped spec validates again.
        defaults = type(self).model_fields
        if self.burstiness != defaults["burstiness"].default and self.mode != "gamma":
            raise ValueError(f"burstiness applies to mode=gamma only (mode={self.mode})")
        burst_fields = [f for f in ("peak_multiplier", "period_s", "duty") if getattr(self, f) != defaults[f].default]
        if burst_fields and self.mode != "burst":
            raise ValueError(f"{', '.join(burst_fields)} apply to mode=burst only (mode={self.mode})")
        return self

    @property
    def is_resolved(self) -> bool:
        return self.mode == "closed" or self.rate is not None

    def resolve(self, capacity_rps: float) -> ArrivalSpec:
        """This spec with `capacity_fraction` turned into `rate` (unchanged if already a rate)."""
        if self.capacity_fraction is None:
            return self.model_copy()
        if not capacity_rps > 0:
            raise ValueError(f"capacity must be > 0 requests/s, got {capacity_rps}")
        data = self.model_dump(exclude_unset=True)
        data.pop("capacity_fraction", None)
        data["rate"] = self.capacity_fraction * capacity_rps
        return ArrivalSpec(**data)

    def require_resolved(self) -> None:
        if not self.is_resolved:
            raise UnresolvedRateError(
                f"arrival rate is capacity_fraction={self.capacity_fraction} of a capacity that "
                "was not measured; call ArrivalSpec.resolve(capacity_rps) (the study does) or "
                "give rate in requests/s"
            )

    def resolved_rate(self) -> float:
        """`rate` of an open loop, in requests/s: raises where it is a capacity fraction not yet
        resolved, or where there is none (a closed loop)."""
        self.require_resolved()
        if self.rate is None:
            raise ValueError(f"mode={self.mode} has no rate: it is a closed loop of {self.concurrency} users")
        return self.rate

    def users(self) -> int:
        """A closed loop's concurrent users: raises for an open loop, which has none."""
        if self.concurrency is None:
            raise ValueError(f"mode={self.mode} has no users: it is an open loop")
        return self.concurrency

    def mean_rate(self) -> float | None:
        """Long-run requests/s of an open loop (None for closed loop or unresolved)."""
        if self.rate is None:
            return None
        return self.resolved_mean_rate()

    def resolved_mean_rate(self) -> float:
        """`mean_rate()` of an open loop whose rate is known: raises as `resolved_rate` does."""
        rate = self.resolved_rate()
        if self.mode == "burst":
            return rate * (1 - self.duty + self.duty * self.peak_multiplier)
        return rate
