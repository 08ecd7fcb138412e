"""One load run against a running OpenAI-compatible server: build, warm up, measure, score inputs.

Order: discover the model (`GET /v1/models`), load its tokenizer, build the workload's requests
(chat prompts checked against the server's `/tokenize`, realigned there if the local count
disagrees), send the warmup requests (excluded), scrape `/metrics`, run the arrival schedule
with a gauge sampler alongside, scrape again, compute the metrics.

Client hygiene during the measured window: everything is prepared beforehand (JSON bodies,
due times, records), the garbage collector's existing objects are frozen (`gc.freeze`, as
`vllm bench serve`), and nothing heavier than a /metrics fetch per second shares the loop.
"""

from __future__ import annotations

import asyncio
import gc
import math
import time
from pathlib import Path

from loadgen.abort import Abort, AbortCheck
from loadgen.client import make_client
from loadgen.dispatch import Draining, run_closed_loop, run_open_loop
from loadgen.interrupts import handled_between_callbacks
from loadgen.liveness import liveness_before_verdict
from loadgen.load_result import LoadResult, LoadRunError
from loadgen.metrics import GoodputSLO, compute_metrics
from loadgen.metrics import lag_limit_ms as default_lag_limit_ms
from loadgen.pinning import off_engine_cpus
from loadgen.preparation import (
    CLOSED_LOOP_BATCH,
    LazyTokenizer,
    RequestPool,
    ServerTokenCounter,
    cached_requests,
    discover_model,
    planned_requests,
)
from loadgen.prompts import MEASURED_STREAM, WARMUP_STREAM, Request
from loadgen.records import RequestRecord
from loadgen.server_metrics import GaugeSampler, MetricsSnapshot, diagnose, fetch_metrics_text
from loadgen.session_dispatch import SessionRunner
from loadgen.sessions import ScriptBook
from loadgen.stall import ProgressWatch, traced
from loadgen.workload import WorkloadSpec

DEFAULT_WARMUP_CONCURRENCY = 16
MAX_PRECONNECT = 1000  # below the usual 1024 open-files limit
ABORT_CHECK_PERIOD_S = 0.5  # how often an open loop with an abort check looks at its records


async def _watched(
    dispatch: asyncio.Future,
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


def _session_runner(spec: WorkloadSpec, tokenizer: LazyTokenizer, lc, model: str, *, warmup: bool) -> SessionRunner:
    """The warm-up's sessions (their own stream, from its start) or the run's (its slice)."""
    assert spec.sessions is not None
    stream = WARMUP_STREAM if warmup else MEASURED_STREAM
    book = ScriptBook(spec.sessions, spec.seed, stream, tokenizer.get())
    first = 0 if warmup else spec.first_request
    return SessionRunner(spec.sessions, book, lc, model, spec.temperature, first=first, warmup=warmup)


def _expected_concurrency(spec: WorkloadSpec, warm: list[RequestRecord]) -> int:
    """Connections the run will need at once: the users of a closed loop; for an open loop,
    rate x request latency (from the warmup, else a guess of 1 s) with 50 % headroom."""
    if spec.arrival.mode == "closed":
        return spec.arrival.concurrency
    done = [r.end_time - r.send_time for r in warm if r.ok]
    latency = sum(done) / len(done) if done else 1.0
    rate = spec.arrival.mean_rate()
    if spec.arrival.mode == "burst":
        rate = spec.arrival.rate * spec.arrival.peak_multiplier
    elif spec.arrival.mode == "trace":  # a trace's bursts, as a burst's default peak
        rate *= 4
    return max(1, min(MAX_PRECONNECT, math.ceil(1.5 * rate * latency) + 8))


async def run_load(
    base_url: str,
    model: str | None,
    spec: WorkloadSpec,
    *,
    client: str = "aiohttp",
    tokenizer_path: str | Path | None = None,
    scrape_metrics: bool = True,
    goodput: GoodputSLO | None = None,
    lag_limit_ms: float | None = None,
    requests: list[Request] | None = None,
    sample_period_s: float = 1.0,
    abort: AbortCheck | None = None,
    avoid_engine_cpus: bool | None = None,
    watch: ProgressWatch | None = None,
) -> LoadResult:
    """One measured run. `requests`: prebuilt measured requests (a study reuses them across trials).

    `avoid_engine_cpus`: while the client runs, keep its thread off the CPUs that a local vLLM
    engine's workers are pinned to (`engine_pinned_cpus`), where it would wait behind them.
    Default: on, unless the environment sets AUTOTUNE_AVOID_ENGINE_CPUS=0.

    `abort` (open loops only): called twice a second with the records so far; an `Abort` returned
    stops the run there (`LoadResult.abort`), its unfinished requests left out of the metrics
    (one that drains stops the sending only: the requests in flight finish and count).

    `lag_limit_ms`: p99 schedule lag that flags `client_behind`; default: 10% of the mean gap
    between arrivals, at least 5 ms (`metrics.lag_limit_ms`).

    `watch`: handed the warm-up's records, then the measured ones, as each phase starts, and
    every request of the run's own (the model, /tokenize, /metrics, the connections' /health),
    so a watcher can tell a hung server (`loadgen.stall`) while the run is in progress.

    Latency statistics count a failed request as above every measured latency
    (`compute_metrics(failed_above=True)`): a run never looks faster for losing requests, and
    no statistic stands in a number for a request that never answered.

    With a `watch`, the run hands back nothing measured on a server that hung: before its
    result, the server shows it is alive or `loadgen.liveness.ServerHung` is raised.
    """
    import aiohttp

    spec.arrival.require_resolved()
    if lag_limit_ms is None:
        lag_limit_ms = default_lag_limit_ms(spec.arrival.mean_rate())
    base_url = base_url.rstrip("/")
    notes: list[str] = []
    closed = spec.arrival.mode == "closed"
    offsets = None
    if not closed:
        offsets = spec.schedule().tolist()
        if not offsets:
            raise LoadRunError("the arrival schedule is empty (duration too short for the rate)")
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120), trace_configs=traced(watch)) as control:
        model, root = await discover_model(control, base_url, model)
        counter = ServerTokenCounter(control, base_url, model) if spec.endpoint == "chat" else None
        tokenizer = LazyTokenizer(tokenizer_path, model, root)
        sessions = spec.sessions
        needed = planned_requests(spec, offsets)
        if sessions is None and (requests is None or len(requests) < needed):
            requests = await cached_requests(spec, tokenizer.get(), needed, False, counter, notes)
        warm = (
            await cached_requests(spec, tokenizer.get(), spec.warmup_requests, True, counter, notes)
            if spec.warmup_requests and sessions is None
            else []
        )

        with off_engine_cpus(avoid_engine_cpus, notes) as client_cpus:
            async with make_client(client, base_url, spec.endpoint, spec.request_timeout_s) as lc:
                warm_pool = RequestPool(spec, tokenizer, lc, model, warm, warmup=True)
                warm_runner = runner = None
                if sessions is not None:  # sessions: each turn built when the answer before it is in
                    warm_runner = _session_runner(spec, tokenizer, lc, model, warmup=True)
                    runner = _session_runner(spec, tokenizer, lc, model, warmup=False)
                    warm_pool.records = warm_runner.records
                if watch is not None:
                    watch.track(warm_pool.records)
                # The warm-up is there so that no measured request pays for a first time (the
                # API server's first chat template and detokenizer, the engine's first prefill of
                # each kind and first decode batch) and to size the connections opened below. So
                # a workload needs as many as it takes to send each of its kinds of request once:
                # sent side by side they cost about the longest one's latency, not their sum
                # (mixed's 6: docs/gpu.md, "The warm-up requests").
                if warm:
                    width = min(len(warm), spec.arrival.concurrency or DEFAULT_WARMUP_CONCURRENCY)
                    await run_closed_loop(lc.send, warm_pool.get, width, len(warm), None)
                elif warm_runner is not None and spec.warmup_requests:
                    n = spec.sessions_for(spec.warmup_requests)
                    width = min(n, spec.arrival.concurrency or DEFAULT_WARMUP_CONCURRENCY)
                    await warm_runner.closed_loop(width, n, None)
                pool = RequestPool(
                    spec, tokenizer, lc, model, requests[:needed] if runner is None else [], warmup=False
                )
                if runner is not None:
                    pool.records = runner.records
                if watch is not None:
                    watch.track(pool.records)
                if hasattr(lc, "preconnect"):
                    ask = watch.ask("GET /health", time.perf_counter()) if watch is not None else None
                    opened = await lc.preconnect(_expected_concurrency(spec, warm_pool.records))
                    if ask is not None:  # pings that all timed out got no answer
                        ask.end(opened > 0, time.perf_counter())

                before = None
                sampler = None
                if scrape_metrics:
                    text = await fetch_metrics_text(control, base_url)
                    if text is None:
                        notes.append("no /metrics from the server: server_* metrics are NaN")
                    else:
                        before = MetricsSnapshot.parse(text)
                        sampler = GaugeSampler(control, base_url, sample_period_s)
                        sampler.start()

                gc.collect()
                gc.freeze()
                cpu0 = time.process_time()
                aborted = None
                try:
                    if closed and runner is not None:
                        n = spec.sessions_for(spec.num_requests) if spec.num_requests is not None else None
                        start, end, _sent = await runner.closed_loop(spec.arrival.concurrency, n, spec.duration_s)
                    elif closed:
                        start, end, _sent = await run_closed_loop(
                            lc.send, pool.get, spec.arrival.concurrency, spec.num_requests, spec.duration_s
                        )
                    elif abort is None and runner is not None:
                        start, end = await runner.open_loop(offsets)
                    elif abort is None:
                        start, end = await run_open_loop(lc.send, pool.prepared, pool.records, offsets)
                    else:
                        draining = Draining()
                        dispatch = asyncio.ensure_future(
                            run_open_loop(lc.send, pool.prepared, pool.records, offsets, draining)
                            if runner is None
                            else runner.open_loop(offsets, draining)
                        )
                        start, end, aborted = await _watched(dispatch, abort, pool.records, offsets, sampler, draining)
                finally:
                    client_cpu = time.process_time() - cpu0
                    gc.unfreeze()
                    samples = await sampler.stop() if sampler is not None else []
                # A hung server looks like a slow one to what scores this run: not before it shows it lives.
                await liveness_before_verdict(watch, base_url, control)
                after = None
                if before is not None:
                    text = await fetch_metrics_text(control, base_url)
                    after = MetricsSnapshot.parse(text) if text is not None else None

    records = [r for r in pool.records if not math.isnan(r.send_time)]
    server = diagnose(before, after, samples) if before is not None and after is not None else None
    if spec.trace is not None and spec.trace.clipped_requests:
        notes.append(
            f"{spec.trace.clipped_requests} of the trace's {len(spec.trace.trace)} requests are clipped to "
            f"{spec.trace.max_total_tokens} tokens (prompt + output, trace.max_total_tokens)"
        )
    if pool.extended:
        notes.append(
            f"closed loop built {pool.extended * CLOSED_LOOP_BATCH} extra requests during "
            "the run (duration-bounded); their chat lengths were counted locally"
        )
    mismatched = sum(
        1
        for r in records
        if r.session is None and r.prompt_tokens is not None and r.prompt_tokens != r.expected_prompt_tokens
    )
    if mismatched:
        notes.append(f"{mismatched} requests: the server counted a different prompt length than built")
    short = sum(
        1
        for r in records
        if r.ok and r.completion_tokens is not None and r.completion_tokens != r.expected_output_tokens
    )
    if short:
        notes.append(
            f"{short} requests got a different output length than max_tokens "
            "(prompt + output > max_model_len truncates silently)"
        )
    metrics = compute_metrics(
        records,
        end - start,
        goodput,
        class_names=spec.class_names,
        lag_limit_ms=lag_limit_ms,
        server=server,
        failed_above=True,
    )
    result = LoadResult(
        base_url,
        model,
        client,
        spec,
        records,
        warm_pool.records,
        metrics,
        server,
        start,
        end,
        notes,
        client_cpu,
        aborted,
        offsets[-1] if offsets else math.nan,
        _requests_planned(offsets, records, runner),
        client_cpus,
        list(samples),
        runner.report(tokenizer.get(), after, warm_runner) if runner is not None else None,
    )
    if metrics.client_behind:
        share = result.client_cpu_share
        why = (
            "the client itself is the bottleneck"
            if share > 0.8
            else "it was starved of CPU by other processes, or paused"
        )
        notes.append(
            f"client fell behind: p99 schedule lag {metrics.schedule_lag_p99_ms:.1f} ms > "
            f"{lag_limit_ms:g} ms, so the offered load was lower than asked (client CPU "
            f"{share:.0%} of a core: {why})"
        )
    return result


def _requests_planned(offsets: list[float] | None, records: list[RequestRecord], runner: SessionRunner | None) -> int:
    """An open loop's scheduled requests: one an arrival, or every turn of the sessions scheduled."""
    if not offsets:
        return len(records)
    if runner is not None:
        return sum(len(runner.script(i).turns) for i in range(len(offsets)))
    return len(offsets)


def default_loop() -> str:
    """uvloop where installed (about 10 % less client CPU per request, see docs/measurement.md)."""
    import importlib.util

    return "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"


def run_async(coro, loop: str = "auto"):
    """Run a coroutine on a fresh event loop: "uvloop", "asyncio", or "auto" (uvloop if installed).

    An interrupt while it runs reaches the caller as the signal's handler raised it, after every
    task of the loop was cancelled and awaited (`interrupts`)."""
    if loop == "auto":
        loop = default_loop()
    if loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    elif loop == "asyncio":
        factory = None
    else:
        raise ValueError(f"loop must be auto, asyncio or uvloop, not {loop!r}")
    with asyncio.Runner(loop_factory=factory) as runner, handled_between_callbacks(runner.get_loop()):
        return runner.run(coro)


def run_load_sync(base_url: str, model: str | None, spec: WorkloadSpec, *, loop: str = "auto", **kwargs) -> LoadResult:
    """`run_load` for synchronous callers (the study): its own event loop, closed afterwards."""
    return run_async(run_load(base_url, model, spec, **kwargs), loop)
