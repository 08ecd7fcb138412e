"""The event loop the tuner's asynchronous work runs on, and the thread that runs it: a fresh loop
per call (`run_async`, uvloop where installed); the interrupts (SIGINT, SIGTERM) that arrive while
it runs, handled between its callbacks instead of inside whichever task happens to be running;
and, while a load's client runs on it, the CPUs it keeps to (`off_engine_cpus`).

**Interrupts.** A Python signal handler runs in the main thread between two bytecodes. When it
raises (Ctrl-C's KeyboardInterrupt, or the study's SIGTERM handler, which raises the same) while
a task of the loop is executing, that task ends with the exception and nobody awaits it any more:
asyncio prints "Task exception was never retrieved" with a traceback when the task is collected,
after the program's own last line (a SIGTERM during calibration did so). Registered with the loop
(`loop.add_signal_handler`), the same handler runs as a loop callback, outside every task: its
KeyboardInterrupt stops the loop, and the runner then cancels and awaits every task before the
interrupt reaches the caller.

**CPUs.** A load client on the loop's thread keeps off the CPUs that local vLLM engine threads
are pinned to (`engine_pinned_cpus`), where it would wait behind them with every chunk stamped
late; `AUTOTUNE_AVOID_ENGINE_CPUS=0` lets it run anywhere.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

INTERRUPTS = (signal.SIGINT, signal.SIGTERM)
WORKER_PROCESS_PREFIX = "VLLM::Worker"  # vLLM's worker process titles (VLLM::Worker, VLLM::Worker_TP1...)
AVOID_ENGINE_CPUS_ENV = "AUTOTUNE_AVOID_ENGINE_CPUS"  # "0": let the client run anywhere


@contextmanager
def handled_between_callbacks(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """While inside, `loop` calls the Python handlers of SIGINT and SIGTERM; restored after.
    Signals with no Python handler (default or ignored), and other threads than the main one
    (where a loop cannot take signals), are left as they are."""
    moved: dict[signal.Signals, Callable[[int, FrameType | None], Any]] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in INTERRUPTS:
            handler = signal.getsignal(signum)
            if callable(handler):
                loop.add_signal_handler(signum, handler, signum, None)
                moved[signum] = handler
    try:
        yield
    finally:
        for signum, handler in moved.items():
            loop.remove_signal_handler(signum)
            signal.signal(signum, handler)


def default_loop() -> str:
    """uvloop where installed (about 10 % less client CPU per request, see docs/measurement.md)."""
    import importlib.util

    return "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"


def run_async(coro: Coroutine[Any, Any, T], loop: str = "auto") -> T:
    """Run a coroutine on a fresh event loop: "uvloop", "asyncio", or "auto" (uvloop if installed).

    An interrupt while it runs reaches the caller as the signal's handler raised it, after every
    task of the loop was cancelled and awaited (see the module)."""
    if loop == "auto":
        loop = default_loop()
    if loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    elif loop == "asyncio":
        factory = None
    else:
        raise ValueError(f"loop must be auto, asyncio or uvloop, not {loop!r}")
    with asyncio.Runner(loop_factory=factory) as runner, handled_between_callbacks(runner.get_loop()):
        return runner.run(coro)


# -- the CPUs the client's thread keeps to ------------------------------------------------


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


@contextmanager
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
