"""The event loop the tuner's asynchronous work runs on (`run_async`: a fresh one per call, uvloop
where installed), and the interrupts (SIGINT, SIGTERM) that arrive while it runs, handled between
its callbacks instead of inside whichever task happens to be running.

A Python signal handler runs in the main thread between two bytecodes. When it raises (Ctrl-C's
KeyboardInterrupt, or the study's SIGTERM handler, which raises the same) while a task of the
loop is executing, that task ends with the exception and nobody awaits it any more: asyncio
prints "Task exception was never retrieved" with a traceback when the task is collected, after
the program's own last line (a SIGTERM during calibration did so). Registered with the
loop (`loop.add_signal_handler`), the same handler runs as a loop callback, outside every task:
its KeyboardInterrupt stops the loop, and the runner then cancels and awaits every task before
the interrupt reaches the caller.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

INTERRUPTS = (signal.SIGINT, signal.SIGTERM)


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
