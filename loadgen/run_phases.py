"""The phases of one load run as its client sends them: the warm-up (`warm_up`), then the
measured window on the workload's arrivals (`measured_window`), and the shapes every step of the
run reads (`Run`, what it built: `Built`, a phase: `Phase`, the window: `Window`). Its own room
because this is the sending, timed and watched; `loadrun` prepares what is sent, scrapes the
server around the window and collects the result.

A caller may stop an open loop early with an abort check (`AbortCheck`): every
ABORT_CHECK_PERIOD_S it is asked about the records so far (`await_or_abort`), and an `Abort` it
returns stops the loop there, with or without the requests in flight. The rules that decide it
live in `objectives.early_abort`; the load run knows only this shape.

Client hygiene during the measured window: everything is prepared beforehand (JSON bodies,
due times, records), the garbage collector's existing objects are frozen (`gc.freeze`, as
`vllm bench serve`), and nothing heavier than a /metrics fetch per second shares the loop.
"""

from __future__ import annotations

import asyncio
import gc
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loadgen import random_streams
from loadgen.client import LoadClient
from loadgen.dispatch import Draining, run_closed_loop, run_open_loop
from loadgen.load_options import Abort, AbortCheck, LoadOptions
from loadgen.preparation import LazyTokenizer, RequestPool
from loadgen.prompts import Request
from loadgen.request_record import RequestRecord
from loadgen.server_metrics import GaugeSample, GaugeSampler
from loadgen.session_dispatch import SessionRunner
from loadgen.sessions import ScriptBook
from loadgen.workload import WorkloadSpec

if TYPE_CHECKING:
    import aiohttp


DEFAULT_WARMUP_CONCURRENCY = 16
ABORT_CHECK_PERIOD_S = 0.5  # how often an open loop with an abort check looks at its records


@dataclass(frozen=True)
class Run:
    """What every step of one run reads: the server (its URL, and the session of the run's own
    requests to it), the workload and its schedule (None: a closed loop), the options, and the
    notes the steps add to, in the order they happen."""

    base_url: str
    control: aiohttp.ClientSession
    spec: WorkloadSpec
    offsets: list[float] | None
    options: LoadOptions
    notes: list[str]


@dataclass(frozen=True)
class Built:
    """What a run builds before its client opens: the served model, its tokenizer, and the
    requests of the warm-up and of the measured run (none for sessions: their turns are built
    as they are sent)."""

    model: str
    tokenizer: LazyTokenizer
    warm: list[Request]
    measured: list[Request]


@dataclass(frozen=True)
class Phase:
    """One phase (the warm-up, or the measured run) as its client sends it: prepared bodies and
    their records, and, for a session workload, the sessions whose turns fill those records."""

    pool: RequestPool
    runner: SessionRunner | None

    @property
    def records(self) -> list[RequestRecord]:
        return self.pool.records


@dataclass(frozen=True)
class Window:
    """The measured window: its perf_counter bounds, why it stopped early (None: it did not),
    the client's CPU time over it, and the server's gauges sampled during it."""

    start: float
    end: float
    aborted: Abort | None
    client_cpu_s: float
    samples: list[GaugeSample]


def prepared_phase(spec: WorkloadSpec, built: Built, lc: LoadClient, *, warmup: bool) -> Phase:
    """The warm-up's or the measured run's requests prepared for `lc`; a session workload's
    records are its sessions' turns."""
    requests = built.warm if warmup else built.measured
    pool = RequestPool(spec, built.tokenizer, lc, built.model, requests, warmup=warmup)
    if spec.sessions is None:
        return Phase(pool, None)
    # sessions: each turn built when the answer before it is in
    runner = _session_runner(spec, built.tokenizer, lc, built.model, warmup=warmup)
    pool.records = runner.records
    return Phase(pool, runner)


def _session_runner(
    spec: WorkloadSpec, tokenizer: LazyTokenizer, lc: LoadClient, model: str, *, warmup: bool
) -> SessionRunner:
    """The warm-up's sessions (their own stream, from its start) or the run's (its slice)."""
    assert spec.sessions is not None
    stream = random_streams.WARMUP if warmup else random_streams.MEASURED
    book = ScriptBook(spec.sessions, spec.seed, stream, tokenizer.get())
    first = 0 if warmup else spec.first_request
    return SessionRunner(spec.sessions, book, lc, model, spec.temperature, first=first, warmup=warmup)


async def warm_up(run: Run, built: Built, lc: LoadClient) -> Phase:
    """Send the warm-up's requests (or sessions), side by side, and wait for them.

    The warm-up is there so that no measured request pays for a first time (the API server's
    first chat template and detokenizer, the engine's first prefill of each kind and first
    decode batch) and to size the connections opened before the measured run. So a workload
    needs as many as it takes to send each of its kinds of request once: sent side by side they
    cost about the longest one's latency, not their sum (mixed's 6: docs/gpu.md, "The warm-up
    requests")."""
    spec = run.spec
    warm = prepared_phase(spec, built, lc, warmup=True)
    if run.options.watch is not None:
        run.options.watch.track(warm.records)
    users = spec.arrival.concurrency or DEFAULT_WARMUP_CONCURRENCY
    if built.warm:
        await run_closed_loop(lc.send, warm.pool.get, min(len(built.warm), users), len(built.warm), None)
    elif warm.runner is not None and spec.warmup_requests:
        n = spec.sessions_for(spec.warmup_requests)
        await warm.runner.closed_loop(min(n, users), n, None)
    return warm


async def measured_window(run: Run, lc: LoadClient, phase: Phase, sampler: GaugeSampler | None) -> Window:
    """The measured window, the garbage collector's existing objects frozen (as `vllm bench
    serve`), the client's CPU time counted over it."""
    gc.collect()
    gc.freeze()
    cpu0 = time.process_time()
    try:
        start, end, aborted = await _dispatch(run, lc, phase, sampler)
    finally:
        client_cpu_s = time.process_time() - cpu0
        gc.unfreeze()
        samples = await sampler.stop() if sampler is not None else []
    return Window(start, end, aborted, client_cpu_s, samples)


async def _dispatch(
    run: Run, lc: LoadClient, phase: Phase, sampler: GaugeSampler | None
) -> tuple[float, float, Abort | None]:
    """Send the measured requests (or sessions) on the workload's arrivals; an open loop with an
    abort check is watched by it. (start, end, why stopped early)."""
    spec, offsets, abort, runner, pool = run.spec, run.offsets, run.options.abort, phase.runner, phase.pool
    if offsets is None:  # a closed loop
        users = spec.arrival.users()
        if runner is not None:
            n = spec.sessions_for(spec.num_requests) if spec.num_requests is not None else None
            start, end, _sent = await runner.closed_loop(users, n, spec.duration_s)
        else:
            start, end, _sent = await run_closed_loop(lc.send, pool.get, users, spec.num_requests, spec.duration_s)
        return start, end, None
    if abort is None:
        if runner is not None:
            start, end = await runner.open_loop(offsets)
        else:
            start, end = await run_open_loop(lc.send, pool.prepared, pool.records, offsets)
        return start, end, None
    draining = Draining()
    dispatch = asyncio.ensure_future(
        run_open_loop(lc.send, pool.prepared, pool.records, offsets, draining)
        if runner is None
        else runner.open_loop(offsets, draining)
    )
    return await await_or_abort(dispatch, abort, pool.records, offsets, sampler, draining)


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
