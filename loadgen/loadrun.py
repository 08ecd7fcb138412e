"""One load run against a running OpenAI-compatible server: build, warm up, measure, score inputs.

Its steps, in order: prepare (discover the model with `GET /v1/models`, load its tokenizer,
build the workload's requests: chat prompts checked against the server's `/tokenize`, realigned
there if the local count disagrees), warm up (the warm-up's requests, excluded), open the
connections, scrape `/metrics`, dispatch the arrival schedule with a gauge sampler alongside,
scrape again, collect the metrics and the notes (what the numbers alone do not say: requests
that were not what was built, a client that fell behind its schedule). How a run is made,
beside the server it runs against and the workload it sends, is its `LoadOptions`
(`load_options`: the client, the tokenizer, what it scrapes and scores against, and who may stop
or watch it). What it returns is its `LoadResult` (`load_result`: its records, metrics, the
server's view, notes and the client's own cost).

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
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loadgen.client import LoadClient, make_client
from loadgen.dispatch import Draining, run_closed_loop, run_open_loop
from loadgen.event_loop import off_engine_cpus, run_async
from loadgen.liveness import ProgressWatch, liveness_before_verdict, traced
from loadgen.load_options import Abort, AbortCheck, LoadOptions
from loadgen.load_result import LoadResult, client_behind_note, request_notes
from loadgen.metrics import RequestRecord, compute_metrics
from loadgen.metrics import lag_limit_ms as default_lag_limit_ms
from loadgen.preparation import (
    LazyTokenizer,
    LoadRunError,
    RequestPool,
    ServerTokenCounter,
    cached_requests,
    discover_model,
    planned_requests,
)
from loadgen.prompts import MEASURED_STREAM, WARMUP_STREAM, Request
from loadgen.server_metrics import GaugeSample, GaugeSampler, MetricsSnapshot, diagnose
from loadgen.session_dispatch import SessionRunner
from loadgen.sessions import ScriptBook
from loadgen.workload import WorkloadSpec
from vllm_http import fetch_metrics_text

if TYPE_CHECKING:
    import aiohttp


DEFAULT_WARMUP_CONCURRENCY = 16
MAX_PRECONNECT = 1000  # below the usual 1024 open-files limit
ABORT_CHECK_PERIOD_S = 0.5  # how often an open loop with an abort check looks at its records


@dataclass(frozen=True)
class _Run:
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
class _Built:
    """What a run builds before its client opens: the served model, its tokenizer, and the
    requests of the warm-up and of the measured run (none for sessions: their turns are built
    as they are sent)."""

    model: str
    tokenizer: LazyTokenizer
    warm: list[Request]
    measured: list[Request]


@dataclass(frozen=True)
class _Phase:
    """One phase (the warm-up, or the measured run) as its client sends it: prepared bodies and
    their records, and, for a session workload, the sessions whose turns fill those records."""

    pool: RequestPool
    runner: SessionRunner | None

    @property
    def records(self) -> list[RequestRecord]:
        return self.pool.records


@dataclass(frozen=True)
class _Window:
    """The measured window: its perf_counter bounds, why it stopped early (None: it did not),
    the client's CPU time over it, and the server's gauges sampled during it."""

    start: float
    end: float
    aborted: Abort | None
    client_cpu_s: float
    samples: list[GaugeSample]


@dataclass(frozen=True)
class _Measured:
    """The measured phase once it ended: its window and the server's /metrics around it (None:
    not scraped, or not served)."""

    phase: _Phase
    window: _Window
    before: MetricsSnapshot | None
    after: MetricsSnapshot | None


async def run_load(
    base_url: str, model: str | None, spec: WorkloadSpec, *, options: LoadOptions | None = None
) -> LoadResult:
    """One measured run of `spec` against the server at `base_url` (its first served model when
    `model` is None), made as `options` say (`LoadOptions`: defaults when None).

    Latency statistics count a failed request as above every measured latency
    (`compute_metrics(failed_above=True)`): a run never looks faster for losing requests, and
    no statistic stands in a number for a request that never answered.
    """
    import aiohttp

    options = options or LoadOptions()
    spec.arrival.require_resolved()
    offsets = _schedule(spec)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout, trace_configs=traced(options.watch)) as control:
        run = _Run(base_url.rstrip("/"), control, spec, offsets, options, [])
        built = await _prepare(run, model)
        with off_engine_cpus(options.avoid_engine_cpus, run.notes) as client_cpus:
            async with make_client(options.client, run.base_url, spec.endpoint, spec.request_timeout_s) as lc:
                warm = await _warm_up(run, built, lc)
                measured = await _measure(run, built, lc, warm)
    return _collect(run, built, warm, measured, client_cpus)


def _schedule(spec: WorkloadSpec) -> list[float] | None:
    """An open loop's arrival offsets (seconds from its start); None for a closed loop."""
    if spec.arrival.mode == "closed":
        return None
    offsets: list[float] = spec.schedule().tolist()
    if not offsets:
        raise LoadRunError("the arrival schedule is empty (duration too short for the rate)")
    return offsets


async def _prepare(run: _Run, model: str | None) -> _Built:
    """The served model, its tokenizer, and the requests the run sends (the options' prebuilt
    measured ones where they are enough), counted with the server where it can count them."""
    spec, prebuilt = run.spec, run.options.requests
    served, root = await discover_model(run.control, run.base_url, model)
    counter = ServerTokenCounter(run.control, run.base_url, served) if spec.endpoint == "chat" else None
    tokenizer = LazyTokenizer(run.options.tokenizer_path, served, root)
    if spec.sessions is not None:
        return _Built(served, tokenizer, [], [])
    needed = planned_requests(spec, run.offsets)
    if prebuilt is None or len(prebuilt) < needed:
        prebuilt = await cached_requests(spec, tokenizer.get(), needed, False, counter, run.notes)
    warm = (
        await cached_requests(spec, tokenizer.get(), spec.warmup_requests, True, counter, run.notes)
        if spec.warmup_requests
        else []
    )
    return _Built(served, tokenizer, warm, list(prebuilt[:needed]))


def _phase(spec: WorkloadSpec, built: _Built, lc: LoadClient, *, warmup: bool) -> _Phase:
    """The warm-up's or the measured run's requests prepared for `lc`; a session workload's
    records are its sessions' turns."""
    requests = built.warm if warmup else built.measured
    pool = RequestPool(spec, built.tokenizer, lc, built.model, requests, warmup=warmup)
    if spec.sessions is None:
        return _Phase(pool, None)
    # sessions: each turn built when the answer before it is in
    runner = _session_runner(spec, built.tokenizer, lc, built.model, warmup=warmup)
    pool.records = runner.records
    return _Phase(pool, runner)


def _session_runner(
    spec: WorkloadSpec, tokenizer: LazyTokenizer, lc: LoadClient, model: str, *, warmup: bool
) -> SessionRunner:
    """The warm-up's sessions (their own stream, from its start) or the run's (its slice)."""
    assert spec.sessions is not None
    stream = WARMUP_STREAM if warmup else MEASURED_STREAM
    book = ScriptBook(spec.sessions, spec.seed, stream, tokenizer.get())
    first = 0 if warmup else spec.first_request
    return SessionRunner(spec.sessions, book, lc, model, spec.temperature, first=first, warmup=warmup)


async def _warm_up(run: _Run, built: _Built, lc: LoadClient) -> _Phase:
    """Send the warm-up's requests (or sessions), side by side, and wait for them.

    The warm-up is there so that no measured request pays for a first time (the API server's
    first chat template and detokenizer, the engine's first prefill of each kind and first
    decode batch) and to size the connections opened before the measured run. So a workload
    needs as many as it takes to send each of its kinds of request once: sent side by side they
    cost about the longest one's latency, not their sum (mixed's 6: docs/gpu.md, "The warm-up
    requests")."""
    spec = run.spec
    warm = _phase(spec, built, lc, warmup=True)
    if run.options.watch is not None:
        run.options.watch.track(warm.records)
    users = spec.arrival.concurrency or DEFAULT_WARMUP_CONCURRENCY
    if built.warm:
        await run_closed_loop(lc.send, warm.pool.get, min(len(built.warm), users), len(built.warm), None)
    elif warm.runner is not None and spec.warmup_requests:
        n = spec.sessions_for(spec.warmup_requests)
        await warm.runner.closed_loop(min(n, users), n, None)
    return warm


async def _measure(run: _Run, built: _Built, lc: LoadClient, warm: _Phase) -> _Measured:
    """The measured phase: its requests prepared and connections opened, then its window between
    two scrapes of the server's /metrics, once the server showed it is alive."""
    watch = run.options.watch
    phase = _phase(run.spec, built, lc, warmup=False)
    if watch is not None:
        watch.track(phase.records)
    await _preconnect(lc, _expected_concurrency(run.spec, warm.records), watch)
    before, sampler = await _scrape_before(run)
    window = await _window(run, lc, phase, sampler)
    # A hung server looks like a slow one to what scores this run: not before it shows it lives.
    await liveness_before_verdict(watch, run.base_url, run.control)
    after = None
    if before is not None:
        text = await fetch_metrics_text(run.control, run.base_url)
        after = MetricsSnapshot.parse(text) if text is not None else None
    return _Measured(phase, window, before, after)


async def _preconnect(lc: LoadClient, n: int, watch: ProgressWatch | None) -> None:
    """Open the connections the run will need, where the client can (an `Ask` of `watch`'s)."""
    preconnect = getattr(lc, "preconnect", None)
    if preconnect is None:
        return
    ask = watch.ask("GET /health", time.perf_counter()) if watch is not None else None
    opened = await preconnect(n)
    if ask is not None:  # pings that all timed out got no answer
        ask.end(opened > 0, time.perf_counter())


def _expected_concurrency(spec: WorkloadSpec, warm: list[RequestRecord]) -> int:
    """Connections the run will need at once: the users of a closed loop; for an open loop,
    rate x request latency (from the warmup, else a guess of 1 s) with 50 % headroom."""
    if spec.arrival.mode == "closed":
        return spec.arrival.users()
    done = [r.end_time - r.send_time for r in warm if r.ok]
    latency = sum(done) / len(done) if done else 1.0
    rate = spec.arrival.resolved_rate()  # the mean rate, but for a burst's: its peak
    if spec.arrival.mode == "burst":
        rate *= spec.arrival.peak_multiplier
    elif spec.arrival.mode == "trace":  # a trace's bursts, as a burst's default peak
        rate *= 4
    return max(1, min(MAX_PRECONNECT, math.ceil(1.5 * rate * latency) + 8))


async def _scrape_before(run: _Run) -> tuple[MetricsSnapshot | None, GaugeSampler | None]:
    """The server's /metrics before the window, and its gauges' sampler started (None, None:
    not asked for, or not served)."""
    if not run.options.scrape_metrics:
        return None, None
    text = await fetch_metrics_text(run.control, run.base_url)
    if text is None:
        run.notes.append("no /metrics from the server: server_* metrics are NaN")
        return None, None
    sampler = GaugeSampler(run.control, run.base_url, run.options.sample_period_s)
    sampler.start()
    return MetricsSnapshot.parse(text), sampler


async def _window(run: _Run, lc: LoadClient, phase: _Phase, sampler: GaugeSampler | None) -> _Window:
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
    return _Window(start, end, aborted, client_cpu_s, samples)


async def _dispatch(
    run: _Run, lc: LoadClient, phase: _Phase, sampler: GaugeSampler | None
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


def _collect(
    run: _Run, built: _Built, warm: _Phase, measured: _Measured, client_cpus: tuple[int, ...] | None
) -> LoadResult:
    """The run's result: its sent requests, their metrics, the server's view, and the notes
    that say what the numbers alone do not."""
    spec, window, runner = run.spec, measured.window, measured.phase.runner
    records = [r for r in measured.phase.records if not math.isnan(r.send_time)]
    before, after = measured.before, measured.after
    server = diagnose(before, after, window.samples) if before is not None and after is not None else None
    run.notes.extend(request_notes(spec, measured.phase.pool.extended, records))
    lag_limit_ms = run.options.lag_limit_ms
    if lag_limit_ms is None:
        lag_limit_ms = default_lag_limit_ms(spec.arrival.mean_rate())
    metrics = compute_metrics(
        records,
        window.end - window.start,
        run.options.goodput,
        class_names=spec.class_names,
        lag_limit_ms=lag_limit_ms,
        server=server,
        failed_above=True,
    )
    result = LoadResult(
        run.base_url,
        built.model,
        run.options.client,
        spec,
        records,
        warm.records,
        metrics,
        server,
        window.start,
        window.end,
        run.notes,
        window.client_cpu_s,
        window.aborted,
        run.offsets[-1] if run.offsets else math.nan,
        _requests_planned(run.offsets, records, runner),
        client_cpus,
        list(window.samples),
        runner.report(built.tokenizer.get(), after, warm.runner) if runner is not None else None,
    )
    if metrics.client_behind:
        run.notes.append(client_behind_note(result, lag_limit_ms))
    return result


def _requests_planned(offsets: list[float] | None, records: list[RequestRecord], runner: SessionRunner | None) -> int:
    """An open loop's scheduled requests: one an arrival, or every turn of the sessions scheduled."""
    if not offsets:
        return len(records)
    if runner is not None:
        return sum(len(runner.script(i).turns) for i in range(len(offsets)))
    return len(offsets)


def run_load_sync(
    base_url: str, model: str | None, spec: WorkloadSpec, *, options: LoadOptions | None = None, loop: str = "auto"
) -> LoadResult:
    """`run_load` for synchronous callers (the study): its own event loop, closed afterwards."""
    return run_async(run_load(base_url, model, spec, options=options), loop)
