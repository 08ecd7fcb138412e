"""Where the load client runs: off the CPUs that local vLLM engine threads are pinned to."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

WORKER_PROCESS_PREFIX = "VLLM::Worker"  # vLLM's worker process titles (VLLM::Worker, VLLM::Worker_TP1...)
AVOID_ENGINE_CPUS_ENV = "AUTOTUNE_AVOID_ENGINE_CPUS"  # "0": let the client run anywhere


def _cpu_list(text: str) -> set[int]:
    """'0-2,5' -> {0, 1, 2, 5} (the kernel's Cpus_allowed_list format)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def engine_pinned_cpus(proc: Path = Path("/proc")) -> set[int]:
    """CPUs that threads of local vLLM worker processes are pinned to.

    vLLM's CPU backend binds each worker's OpenMP threads to cores of their own
    (`VLLM_CPU_OMP_THREADS_BIND=auto`: all cores but the ones it reserves for the API server and
    the engine core), and those threads compute for the whole run. A load client that the kernel
    places on such a core waits behind them, up to seconds at a time, with every chunk that
    arrived meanwhile stamped late (docs/measurement.md, "The client"). Threads that may run
    anywhere are not pinned (their allowed set is this process's, in the same container); on a
    machine without /proc, or without such engines, the set is empty.
    """
    everything = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    pinned: set[int] = set()
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return pinned
    for pid in pids:
        try:
            if not (proc / pid / "comm").read_text().startswith(WORKER_PROCESS_PREFIX):
                continue
            tids = os.listdir(proc / pid / "task")
        except OSError:
            continue
        for tid in tids:
            try:
                status = (proc / pid / "task" / tid / "status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("Cpus_allowed_list:"):
                    allowed = _cpu_list(line.split(":", 1)[1])
                    if allowed and allowed < everything:
                        pinned |= allowed
                    break
    return pinned


@contextlib.contextmanager
def off_engine_cpus(enabled: bool | None, notes: list[str]):
    """Keep the calling thread (the event loop's: the client) off the CPUs local vLLM engines
    are pinned to, for the block; yields the CPUs it may use, or None where nothing changed."""
    if enabled is None:
        enabled = os.environ.get(AVOID_ENGINE_CPUS_ENV, "1").strip().lower() not in ("0", "false", "no", "off")
    if not enabled or not hasattr(os, "sched_setaffinity"):
        yield None
        return
    before = os.sched_getaffinity(0)
    pinned = engine_pinned_cpus()
    allowed = before - pinned
    if not pinned & before or not allowed:  # nothing to avoid, or nowhere else to go
        yield None
        return
    os.sched_setaffinity(0, allowed)
    notes.append(
        f"client kept on CPU {_cpu_text(allowed)}, off CPU {_cpu_text(pinned & before)} (pinned vLLM engine threads)"
    )
    try:
        yield tuple(sorted(allowed))
    finally:
        os.sched_setaffinity(0, before)


def _cpu_text(cpus: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))
