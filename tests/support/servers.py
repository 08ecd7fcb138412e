"""Real vLLM servers in tests: quick-starting values, the process groups a run leaves, and the line
a hang is said in."""

import os
import re

import psutil

from serving.process.process_group import group_members

# A hang's line: what was silent, for how long, how many requests were in flight or cut off, then
# what showed it (every process stopped, /health silent) or what /health said at the bound.
HANG_LINE = re.compile(
    r"(no token and no finished request for (?P<quiet>\d+) s with \d+ requests? in flight"
    r"( and \d+ cut off unanswered)?|no answer to [A-Z]+ /\S+(, [A-Z]+ /\S+)* for (?P<asked>\d+) s) "
    r"\(bound (?P<bound>\d+) s\); (?P<why>.+)"
)


def quick_server_values(ctx, **overrides):
    """A fast-starting server on the default model: eager, small KV cache."""
    values = {"dtype": ctx.dtype, "enforce_eager": True, "max_model_len": 2048, "memory_utilization": 0.25}
    values.update(overrides)
    return {k: v for k, v in values.items() if v is not None}


def server_groups(root_pid: int) -> set[int]:
    """Process groups of the vLLM servers below a process (the tuner, or this test)."""
    groups = set()
    for child in psutil.Process(root_pid).children(recursive=True):
        try:
            if "server_guard" in " ".join(child.cmdline()):
                groups.add(os.getpgid(child.pid))
        except (psutil.NoSuchProcess, ProcessLookupError):
            continue
    return groups


def zygotes(root_pid: int) -> set[int]:
    """The study zygotes below a process (`serving/process/zygote.py`)."""
    found = set()
    for child in psutil.Process(root_pid).children(recursive=True):
        try:
            if "autotune_vllm_zygote" in " ".join(child.cmdline()):
                found.add(child.pid)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def alive(pids: set[int]) -> set[int]:
    """Those of `pids` still running (not zombies)."""

    def running(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    return {p for p in pids if running(p)}


def leftovers(groups: set[int]) -> list[str]:
    """Live (non-zombie) processes left in those groups."""
    return [f"{p.pid} {p.name()}" for g in groups for p in group_members(g)]
