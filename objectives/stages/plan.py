"""One stage as planned: its requests (a slice of the workload's sequence), its rate, how long that
takes, its time cap, and the stopping rule it runs under.

Every stage holds the requests its verdicts need (`capacity_spec.stage_size`), whatever the rate: at a low rate it
takes longer, never holds fewer. Its requests are stage k's own slice of the workload's one long
seeded sequence (`STAGE_STRIDE` apart), so stage k sends the same requests in every trial
(common random numbers) and no two stages replay the same prefix; the target stage's slice starts
at the sequence's start, so a confirmation's longer target stage sends the screening's requests
and then more of the same sequence. A burst arrival process's stage spans whole cycles of it.

Under the decided rule a stage is planned to its cap (`extend_to` x its requests) and looked at
in slices of its planned length (`slo_verdict.StageLength`); the workload's `duration_s` caps its
sending time, and a stage whose requests do not fit it is **capped**: its verdict says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loadgen import WorkloadSpec
from objectives.early_abort import CERTAIN, DECIDED
from objectives.slo_verdict import StageLength
from objectives.stages.capacity_spec import CapacitySpec

TARGET, CAPACITY = "target", "capacity"  # a stage's kind: the first stage, then the search's
# Stage k's requests start at k x this in the workload's sequence: far enough apart that no
# stage of any length reaches the next one's slice.
STAGE_STRIDE = 1 << 20


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
