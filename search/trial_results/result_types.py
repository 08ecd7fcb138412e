"""The typed results of a trial, and what its row takes from its plan and its worker.

What one server start brings back is a `TrialOutcome`: its load stages, the capacity estimate, the
starts lost to a transient failure (`RetriedStart`), where the seconds went (`Timings`, with the
`ServerReuse` of a trial measured on a kept server) and the failure. `Placement` and
`PlannedTrial` are what a row takes from the worker that ran the trial and from its plan. These
are the shapes both sides of the package convert: `to_row` writes them into a row's columns,
`from_row` reads them back; neither imports the other, both import these.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypedDict

from objectives.capacity import CapacityEstimate
from objectives.stages import StageResult
from serving import Failure, ServerArgs, StartAnatomy
from storage.tables import TrialStatus


@dataclass(frozen=True)
class RetriedStart:
    """A server start of a trial lost to a transient failure, and retried on the same flags."""

    failure: Failure
    seconds: float  # the lost start took this long
    log_path: str | None  # its server log, set aside (server.N.log)
    zygote_failure: str | None = None  # as `Timings.zygote_failure`, in this start


@dataclass(frozen=True)
class ServerReuse:
    """A trial measured on the server an earlier trial started, after lowering its scheduler
    limits in place (`search.executor.reuse`; docs/measurement.md, "Screening without a
    restart"), or why the server kept for it was not used (`declined`: the trial started fresh)."""

    server: str | None = None  # the log directory of the trial whose start it was ("trial-0003")
    saved_start_s: float | None = None  # that start's spawn to /health: what this trial did not pay
    knobs: dict[str, int] = field(default_factory=dict)  # the limits set for this trial
    reconfigure_s: float | None = None  # the drain and the reconfiguration
    declined: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, {})}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ServerReuse:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


@dataclass
class Timings:
    """Where a trial's seconds went (None: the trial did not get that far)."""

    start_s: float | None = None  # spawn to /health (None on a reused server: `reuse`)
    load_s: float | None = None  # warm-up, every load stage, the drains between them
    stop_s: float | None = None  # None where the server was kept for the next trial
    total_s: float | None = None  # every start of the trial, retried ones included
    start_anatomy: StartAnatomy | None = None  # the start's phases, from the server's log
    reuse: ServerReuse | None = None  # measured on a reconfigured server, or why a kept one was not used
    # The study's zygote failed in this start and was killed: a new zygote forked the server, or it
    # was exec'd, in the same start (its lines; the start itself is judged by its server).
    zygote_failure: str | None = None


@dataclass
class TrialOutcome:
    """What one trial (or confirmation run) measured on its server start, as the executor hands it back."""

    status: TrialStatus  # OK or FAILED
    failure: Failure | None = None
    metrics: dict[str, float] = field(default_factory=dict)  # flat: the target stage's, and the capacity's
    server_diagnostics: dict[str, float] = field(default_factory=dict)
    timings: Timings = field(default_factory=Timings)
    log_path: Path | None = None
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC).replace(tzinfo=None))
    command: str = ""
    stages: list[StageResult] = field(default_factory=list)  # in order: the target stage first
    capacity: CapacityEstimate | None = None  # when a capacity search ran
    retried: list[RetriedStart] = field(default_factory=list)  # earlier starts lost to a transient failure


class Neighbour(TypedDict):
    """A trial another worker of the study was running when this one started."""

    trial: int
    worker: str  # host:pid
    slot: str | None


class Placement(TypedDict):
    """Who ran a trial where (`search.study.coordination.claim`)."""

    host: str
    pid: int
    slot: str | None  # the worker's devices ("cpu 0", "gpu 2,3"); None: the machine
    neighbours: list[Neighbour]


class PlannedTrial(Protocol):
    """What a trial's row takes from its plan (`search.executor.TrialPlan`)."""

    @property
    def baseline(self) -> str | None: ...

    @property
    def params(self) -> dict[str, Any]: ...

    @property
    def config(self) -> dict[str, Any]: ...

    @property
    def server_args(self) -> ServerArgs: ...

    @property
    def fingerprint(self) -> str: ...
