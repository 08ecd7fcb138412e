"""Sends prepared requests on schedule: open loop (precomputed due times) or closed loop (users).

Kept minimal, since at thousands of requests/s the dispatcher shares one event loop with
every stream it started: no per-request allocation beyond the task, due times as floats.
Every request records when it was due (`scheduled_time`), so lag is measured, never assumed.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol, TypeVar


class Scheduled(Protocol):
    """What the loops send on a schedule: a request's record, or a session's start."""

    scheduled_time: float  # perf_counter when it was due


Body = TypeVar("Body")
Item = TypeVar("Item", bound=Scheduled)
# Sends one prepared body and fills its item in; a coroutine, since each send becomes a task.
Send = Callable[[Body, Item], Coroutine[Any, Any, None]]


class Draining:
    """Set `on` before cancelling `run_open_loop` to stop its sending but not what is in flight."""

    on: bool = False


async def run_open_loop(
    send: Send[Body, Item],
    prepared: Sequence[Body],
    records: Sequence[Item],
    offsets: Sequence[float],
    draining: Draining | None = None,
) -> tuple[float, float]:
    """Send request i at start + offsets[i]; wait for all. Returns (start, end) perf_counter times.

    Cancelled (an early abort), it cancels the requests in flight before it re-raises; with
    `draining.on`, it stops sending, waits for the requests in flight and returns."""
    perf = time.perf_counter
    sleep = asyncio.sleep
    create_task = asyncio.get_running_loop().create_task
    tasks: list[asyncio.Task[None]] = []
    append = tasks.append
    start = perf()
    try:
        for body, rec, offset in zip(prepared, records, offsets):
            due = start + offset
            rec.scheduled_time = due
            delay = due - perf()
            while delay > 0:  # uvloop's timers round to the nearest ms: never send early
                await sleep(delay)
                delay = due - perf()
            append(create_task(send(body, rec)))
        if tasks:
            await asyncio.gather(*tasks)
    except asyncio.CancelledError:  # an early abort: stop sending, and stop what is in flight
        if draining is not None and draining.on:
            await asyncio.gather(*tasks, return_exceptions=True)
            return start, perf()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return start, perf()


async def run_closed_loop(
    send: Send[Body, Item],
    get: Callable[[int], tuple[Body, Item]],
    concurrency: int,
    max_requests: int | None,
    duration_s: float | None,
) -> tuple[float, float, int]:
    """`concurrency` users, each sending its next request when its last one finished.

    Stops handing out requests after max_requests or duration_s (requests in flight finish).
    `get(i)` returns the i-th prepared request and its record. Returns (start, end, sent).
    """
    perf = time.perf_counter
    limit = max_requests if max_requests is not None else math.inf
    start = perf()
    deadline = start + duration_s if duration_s is not None else math.inf
    next_index = 0

    async def user() -> None:
        nonlocal next_index
        while True:
            now = perf()
            if next_index >= limit or now >= deadline:
                return
            i = next_index
            next_index += 1
            body, rec = get(i)
            rec.scheduled_time = now
            await send(body, rec)

    await asyncio.gather(*(user() for _ in range(concurrency)))
    return start, perf(), next_index
