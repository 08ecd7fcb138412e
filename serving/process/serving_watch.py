"""A measurement watched against its server (`while_serving`, the one watcher of trials and
calibration): the server's death, or its hang as the load generator's progress watch and the
server's stopped processes show it, ends the measurement at once with the failure named. The first
load run's records give the last phases of the start's anatomy (`FirstTokenWatch`: the first token
served, the first measured request)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TypeVar

from loadgen import ProgressWatch, RequestRecord, ServerHung, Stall
from serving.failures import Failure, FailureClass, FailurePhase
from serving.process.server import POLL_S, ServerFailed, VllmServer

T = TypeVar("T")

CANCEL_WAIT_S = 5.0  # for the load generator to let go of its requests after a failure
# What a server whose every process is stopped shows (`loadgen.stall`: evidence of a hang).
PROCESSES_STOPPED = "every process of the server is stopped (SIGSTOP or a tracer)"


class FirstTokenWatch(ProgressWatch):
    """A `ProgressWatch` that keeps the first load run's records, its warm-up's and its measured
    ones (`run_load` tracks them in that order, the warm-up's even when empty): the first token
    the server served and the first measured request sent, the last phases of its start's
    anatomy."""

    def __init__(self, bound_s: float):
        super().__init__(bound_s)
        self._first_run: list[list[RequestRecord]] = []

    def track(self, records: list[RequestRecord]) -> None:
        super().track(records)
        if len(self._first_run) < 2:
            self._first_run.append(records)

    def _first_run_records(self) -> list[RequestRecord]:
        return [r for records in self._first_run for r in records]

    def first_token_at(self) -> float | None:
        """When the first token arrived (time.perf_counter, the load generator's clock)."""
        firsts = [r.first_token_time for r in self._first_run_records() if r.first_token_time is not None]
        return min(firsts) if firsts else None

    def first_measured_at(self) -> float | None:
        """When the first measured request (not a warm-up) was sent, on the same clock: the end
        of the load's warm-up."""
        sent = [r.send_time for r in self._first_run_records() if not r.warmup and r.send_time == r.send_time]
        return min(sent) if sent else None


def hang_failure(server: VllmServer, stall: Stall, phase: FailurePhase) -> Failure:
    """A server that stopped making progress, with what was seen (and whether /health answers,
    unless what showed the hang already says)."""
    line = stall.describe()
    if stall.evidence is None:
        line += "; /health answered 200" if server.healthy(timeout=2.0) else "; /health did not answer"
    return Failure(
        FailureClass.HANG,
        line,
        phase=phase,
        elapsed_s=server.elapsed(),
        log_path=str(server.spec.log_path),
    )


async def while_serving(
    server: VllmServer, measure: Awaitable[T], phase: FailurePhase, watch: ProgressWatch | None = None
) -> T:
    """`measure`'s result, unless the server dies under it (OOM under load, say) or, with a
    `watch` the load generator reports to, hangs (`loadgen.stall`'s rule: silent for the stall
    bound, or silent with every process stopped, read here; or silent when a load run asked
    before its result was scored): then the measurement is cancelled at
    once and ServerFailed names why, with `phase`."""
    task = asyncio.ensure_future(measure)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=2 * POLL_S)
            if done:
                try:
                    return task.result()
                except ServerHung as hung:  # a server that died meanwhile says more than its silence
                    raise ServerFailed(
                        server.poll_failure(phase=phase) or hang_failure(server, hung.stall, phase)
                    ) from None
            failure = server.poll_failure(phase=phase)
            if failure is None and watch is not None:
                now = time.perf_counter()
                stall = watch.check(now) or (
                    watch.check(now, PROCESSES_STOPPED) if server.processes_stopped() else None
                )
                failure = hang_failure(server, stall, phase) if stall is not None else None
            if failure is not None:
                raise ServerFailed(failure)
    finally:  # a failure, or this coroutine cancelled (an interrupt): the measurement lets go too
        if not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=CANCEL_WAIT_S)
        if task.done() and not task.cancelled():
            task.exception()  # seen here: never "Task exception was never retrieved"
