"""loadgen.dispatch: a stage stopped because its verdict is decided stops sending and lets the
requests in flight finish; an early abort cancels them."""

from __future__ import annotations

import asyncio

from loadgen.dispatch import Draining, run_open_loop
from loadgen.request_record import RequestRecord


async def stopped(draining: Draining | None):
    """Three requests due at once and in flight, the rest due much later; then the stop."""
    started, finished, cancelled = [], [], []
    answer = asyncio.Event()

    async def send(body, rec):
        started.append(rec.index)
        try:
            await answer.wait()
            finished.append(rec.index)
        except asyncio.CancelledError:
            cancelled.append(rec.index)
            raise

    records = [RequestRecord(i, "a", float("nan"), 8, 4) for i in range(10)]
    offsets = [0.0, 0.0, 0.0] + [3600.0] * 7
    dispatch = asyncio.ensure_future(run_open_loop(send, [None] * 10, records, offsets, draining))
    while len(started) < 3:
        await asyncio.sleep(0)
    if draining is not None:
        draining.on = True
    dispatch.cancel()
    await asyncio.sleep(0)
    answer.set()  # the server answers what it has
    result = (await asyncio.gather(dispatch, return_exceptions=True))[0]
    return started, finished, cancelled, result


def test_a_draining_stop_lets_the_requests_in_flight_finish_and_sends_no_more():
    started, finished, cancelled, result = asyncio.run(stopped(Draining()))
    assert started == [0, 1, 2] and sorted(finished) == [0, 1, 2] and cancelled == []
    assert isinstance(result, tuple)


def test_an_abort_cancels_the_requests_in_flight():
    started, finished, cancelled, result = asyncio.run(stopped(None))
    assert started == [0, 1, 2] and finished == [] and sorted(cancelled) == [0, 1, 2]
    assert isinstance(result, asyncio.CancelledError)
