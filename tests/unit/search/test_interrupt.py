"""while_serving, cancelled, cancels its measurement and awaits it: nothing is left for asyncio to
log (serving.process.while_serving).
"""

from __future__ import annotations

import asyncio
import gc

import pytest

from loadgen.event_loop import run_async
from serving.process import while_serving


class _LiveStub:
    """What while_serving asks of a server, for a stub that never dies."""

    def poll_failure(self, phase: str):
        return None


def test_while_serving_cancelled_cancels_its_measurement_and_awaits_it(caplog):
    """Cancelled (an interrupt, a caller's timeout), the watch lets go of the measurement at
    once and sees how it ended, even when its clean-up fails."""
    ended: list[str] = []

    async def measure() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise RuntimeError("clean-up failed") from None

    async def cancelled_soon() -> None:
        await asyncio.wait_for(while_serving(_LiveStub(), measure(), "load"), 0.2)

    gc.collect()
    caplog.clear()
    with pytest.raises(TimeoutError):
        run_async(cancelled_soon(), "asyncio")
    gc.collect()
    assert ended == ["cancelled"]
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
