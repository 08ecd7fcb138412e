"""Why a trial failed, in one vocabulary: the failure classes, the phase a failure happened in,
and what to do about each class.

It lives with the server library because a server's failures are named here first: a start
that failed or a measurement the server broke (`serving.process`), its log read by
`failures.classify`. The study stores `Failure.cls` and `Failure.phase` by value, and the
diagnosis (`objectives.diagnosis`) reads the advice from the class.
A new class is one member here with its advice (`_ADVICE`) and, where a log line gives it away,
one rule in `serving/failures.py`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum

# How long a vLLM server may take to answer `/health` before its start counts as failed
# (`FailureClass.START_TIMEOUT`): the one default of the scenario's `server.startup_timeout_s`,
# the launcher's and the executor's.
DEFAULT_STARTUP_TIMEOUT_S = 300.0


class FailurePhase(StrEnum):
    PRECHECK = "precheck"  # rejected before any start (known-invalid flags): no server, no cost
    STARTUP = "startup"
    CALIBRATION = "calibration"
    LOAD = "load"

    @property
    def before_load(self) -> bool:
        return self in (FailurePhase.PRECHECK, FailurePhase.STARTUP)


class FailureClass(StrEnum):
    INVALID_FLAG = "invalid_flag"
    INVALID_CONFIG = "invalid_config"
    KV_INSUFFICIENT = "kv_insufficient"
    MEM_BUDGET_UNAVAILABLE = "mem_budget_unavailable"
    OOM = "oom"
    KILLED = "killed"  # SIGKILL with no error of its own: from outside, or the OOM killer unseen
    PORT_BUSY = "port_busy"
    START_TIMEOUT = "start_timeout"
    LOAD_ERROR = "load_error"  # the load generator failed, not the server (its error is the line)
    HANG = "hang"  # alive, but no token and no finished request for the stall bound (loadgen.liveness)
    ZYGOTE = "zygote"  # the study's zygote, not the server: it did not fork the server in time
    OTHER = "other"

    @property
    def transient(self) -> bool:
        """May say nothing about the flags: the same flags may well run on a second try (a trial
        gets one more server start, `search.executor`). A hang may be the machine's (swap, a
        stopped process) or the configuration's (a deadlock): once is taken for the former, a
        second hang on a fresh server fails the trial for good. A zygote's failure says nothing
        about the server's flags at all."""
        return self in (
            FailureClass.KILLED,
            FailureClass.PORT_BUSY,
            FailureClass.START_TIMEOUT,
            FailureClass.HANG,
            FailureClass.ZYGOTE,
        )

    @property
    def advice(self) -> list[str]:
        """The next steps the diagnosis gives for a trial that failed this way."""
        return list(_ADVICE[self])


_ADVICE: dict[FailureClass, list[str]] = {
    FailureClass.KV_INSUFFICIENT: [
        "raise memory_utilization (the KV cache must hold at least one max_model_len request)",
        "or lower max_model_len towards the workload's longest request",
    ],
    FailureClass.MEM_BUDGET_UNAVAILABLE: [
        "lower memory_utilization: the memory it asks for was not free at start",
        "check that no earlier server (another trial, another user) still holds memory",
    ],
    FailureClass.OOM: [
        "lower memory_utilization or max_num_seqs (the sampler warmup allocates max_num_seqs requests)",
        "a smaller or quantized model: less memory for weights leaves more for the KV cache",
    ],
    FailureClass.INVALID_CONFIG: ["fix the combination the line names; narrow the search space so it is never sampled"],
    FailureClass.INVALID_FLAG: [
        "the installed vLLM lacks this flag: drop it from the scenario (see `autotune params`)"
    ],
    FailureClass.START_TIMEOUT: ["raise server.startup_timeout_s; keep enforce_eager on CPU (no compile at start)"],
    FailureClass.PORT_BUSY: [
        "transient: the trial was retried on a new port; if every start lost the race, run the study again"
    ],
    FailureClass.KILLED: [
        "transient: something outside killed the server (SIGKILL, no error of its own); the trial was "
        "retried on the same flags. If it recurs, check the kernel log (dmesg) for the OOM killer"
    ],
    FailureClass.LOAD_ERROR: [
        "the load generator failed, not the server: fix what the line names (URL, model, tokenizer, "
        "workload) and run the study again; the same flags are then measured again"
    ],
    FailureClass.HANG: [
        "the server stopped producing tokens under load (stopped, deadlocked or swapped out), and again "
        "on a fresh server: read its log up to the failure line's time, and check the machine's memory and swap"
    ],
    FailureClass.ZYGOTE: [
        "transient: the study's zygote (the interpreter that forks each server) did not fork this one within "
        "the start timeout; the trial was retried on the same flags. A zygote that stops answering is killed "
        "and replaced, and after two such failures the study execs its servers. If it recurs, read zygote.log "
        "(beside the calibration's server log) and check the machine's memory and swap",
    ],
    FailureClass.OTHER: ["read the trial's server log for the root cause"],
}
assert set(_ADVICE) == set(FailureClass), "every failure class carries its advice"


@dataclass(frozen=True)
class Failure:
    cls: FailureClass
    line: str  # the decisive log line
    phase: FailurePhase = FailurePhase.STARTUP
    returncode: int | None = None
    elapsed_s: float | None = None
    log_path: str | None = None

    def __post_init__(self):  # stored rows and older callers give plain strings
        object.__setattr__(self, "cls", FailureClass(self.cls))
        object.__setattr__(self, "phase", FailurePhase(self.phase))

    def as_dict(self) -> dict:
        d = asdict(self)
        d["cls"] = self.cls.value
        d["phase"] = self.phase.value
        return d

    def summary(self) -> str:
        return f"{self.cls.value} ({self.phase.value}): {self.line}"
