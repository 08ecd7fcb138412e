"""run_async delivers SIGINT and SIGTERM between the loop's callbacks (loadgen.event_loop):
an interrupt whose handler raises ends the run with that exception after every task was
cancelled and awaited, wherever it landed; handlers that do not raise, or none, are left alone."""

from __future__ import annotations

import asyncio
import gc
import signal

import pytest

from loadgen.event_loop import run_async


def _raise_interrupt(signum, frame):  # as the study loop's SIGTERM handler
    raise KeyboardInterrupt


async def _interrupted_in_a_task_of_its_own(signum: int, cleaned: list[str]) -> None:
    """A task that nobody awaits takes the signal; the main one is busy elsewhere."""

    async def background() -> None:
        signal.raise_signal(signum)
        await asyncio.sleep(60)

    task = asyncio.ensure_future(background())
    try:
        await asyncio.sleep(60)
    finally:
        cleaned.append("main")
        task.cancel()


@pytest.fixture
def term_raises():
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_interrupt_landing_in_any_task_ends_the_run_cleanly(term_raises, caplog, loop, signum):
    pytest.importorskip(loop)
    cleaned: list[str] = []
    gc.collect()
    caplog.clear()
    with pytest.raises(KeyboardInterrupt):
        run_async(_interrupted_in_a_task_of_its_own(signum, cleaned), loop)
    gc.collect()
    assert cleaned == ["main"]
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
    # the handlers are the caller's again
    assert signal.getsignal(signal.SIGTERM) is _raise_interrupt
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_handler_that_does_not_raise_lets_the_run_go_on(term_raises):
    seen: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))

    async def main() -> str:
        signal.raise_signal(signal.SIGTERM)
        await asyncio.sleep(0.05)
        return "done"

    assert run_async(main(), "asyncio") == "done" and seen == [signal.SIGTERM]


def test_an_ignored_signal_stays_ignored(term_raises):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

    async def main() -> str:
        signal.raise_signal(signal.SIGTERM)
        await asyncio.sleep(0.05)
        return "done"

    assert run_async(main(), "asyncio") == "done"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
