"""Running a measurement against a server while watching that server (used by calibration)."""

from __future__ import annotations

import asyncio
from typing import Awaitable, TypeVar

from search.serving.server import POLL_S, ServerFailed, VllmServer

T = TypeVar("T")


async def while_serving(server: VllmServer, measure: Awaitable[T], phase: str) -> T:
    """`measure`'s result, unless the server dies under it (OOM under load, say): then the
    measurement is cancelled at once and ServerFailed names why, with `phase`."""
    task = asyncio.ensure_future(measure)
    while True:
        done, _ = await asyncio.wait({task}, timeout=2 * POLL_S)
        if done:
            return task.result()
        failure = server.poll_failure(phase=phase)
        if failure is not None:
            task.cancel()
            raise ServerFailed(failure)
