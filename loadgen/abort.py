"""A load run's abort check: what it answers (`Abort`), its shape (`AbortCheck`), and the watch
that asks it while an open loop runs (`await_or_abort`): every ABORT_CHECK_PERIOD_S the check is
asked about the records so far, and an `Abort` it returns stops the loop there, with or without
the requests in flight.

The rules that decide it live in `objectives.early_abort`; the load run knows only this shape.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from loadgen.dispatch import Draining
from loadgen.records import RequestRecord
from loadgen.server_metrics import GaugeSample, GaugeSampler

ABORT_CHECK_PERIOD_S = 0.5  # how often an open loop with an abort check looks at its records


@dataclass(frozen=True)
class Abort:
    """Why a stage stopped early, and by how much it is certain to miss (a lower bound on the
    normalized SLO violation, as `scoring.SLOSpec.violation`; NaN when no rule bounds it).
    `passed`: stopped because every SLO is very likely met (a capacity stage), not missed.
    `drain`: stop sending but let the requests in flight finish, so the run ends as one planned
    to end here would (its verdict is decided: the rest of the schedule would not change it)."""

    reason: str
    margin: float = math.nan
    metric: str | None = None  # the SLO's metric, and a certain lower bound on its final value
    value: float = math.nan
    passed: bool = False
    drain: bool = False


AbortCheck = Callable[[Sequence[RequestRecord], float, Sequence[GaugeSample]], "Abort | None"]


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
