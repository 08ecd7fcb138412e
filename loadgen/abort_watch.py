"""An open loop under an abort check (`abort.AbortCheck`): the check is asked about the records so
far every ABORT_CHECK_PERIOD_S while the loop runs, and an `Abort` it returns stops the loop there,
with or without the requests in flight."""

from __future__ import annotations

import asyncio
import time

from loadgen.abort import Abort, AbortCheck
from loadgen.dispatch import Draining
from loadgen.records import RequestRecord
from loadgen.server_metrics import GaugeSampler

ABORT_CHECK_PERIOD_S = 0.5  # how often an open loop with an abort check looks at its records


async def await_or_abort(
    dispatch: asyncio.Future[tuple[float, float]],
    check: AbortCheck,
    records: list[RequestRecord],
    offsets: list[float],
    sampler: GaugeSampler | None,
    draining: Draining,
) -> tuple[float, float, Abort | None]:
    """Await the open loop, asking `check` every ABORT_CHECK_PERIOD_S whether its outcome is
    already certain; if so, stop it (and the requests in flight, unless the `Abort` drains:
    then they finish). (start, end, why stopped)."""
    try:
        while True:
            done, _ = await asyncio.wait({dispatch}, timeout=ABORT_CHECK_PERIOD_S)
            if done:
                start, end = dispatch.result()
                return start, end, None
            verdict = check(records, time.perf_counter(), sampler.samples if sampler is not None else ())
            if verdict is not None and verdict.drain:
                draining.on = True
                dispatch.cancel()
                start, end = await dispatch
                return start, end, verdict
            if verdict is not None:
                dispatch.cancel()
                await asyncio.gather(dispatch, return_exceptions=True)
                start = records[0].scheduled_time - offsets[0]
                return start, time.perf_counter(), verdict
    finally:
        if not dispatch.done():
            dispatch.cancel()
