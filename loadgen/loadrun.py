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

What it sends, phase by phase (and the abort check that may stop an open loop early), is
`run_phases`'.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from loadgen.client import LoadClient, make_client
from loadgen.event_loop import off_engine_cpus, run_async
from loadgen.liveness import liveness_before_verdict
from loadgen.load_options import LoadOptions
from loadgen.load_result import LoadResult, client_behind_note, request_notes
from loadgen.metrics import compute_metrics
from loadgen.metrics import lag_limit_ms as default_lag_limit_ms
from loadgen.preparation import (
    LazyTokenizer,
    LoadRunError,
    ServerTokenCounter,
    cached_requests,
    discover_model,
    planned_requests,
)
from loadgen.request_record import RequestRecord
from loadgen.run_phases import Built, Phase, Run, Window, measured_window, prepared_phase, warm_up
from loadgen.server_metrics import GaugeSampler, MetricsSnapshot, diagnose
from loadgen.session_dispatch import SessionRunner
from loadgen.stall import ProgressWatch, traced
from loadgen.workload import WorkloadSpec
from vllm_http import fetch_metrics_text

MAX_PRECONNECT = 1000  # below the usual 1024 open-files limit


@dataclass(frozen=True)
class _Measured:
    """The measured phase once it ended: its window and the server's /metrics around it (None:
    not scraped, or not served)."""

    phase: Phase
    window: Window
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
        run = Run(base_url.rstrip("/"), control, spec, offsets, options, [])
        built = await _prepare(run, model)
        with off_engine_cpus(options.avoid_engine_cpus, run.notes) as client_cpus:
            async with make_client(options.client, run.base_url, spec.endpoint, spec.request_timeout_s) as lc:
                warm = await warm_up(run, built, lc)
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


async def _prepare(run: Run, model: str | None) -> Built:
    """The served model, its tokenizer, and the requests the run sends (the options' prebuilt
    measured ones where they are enough), counted with the server where it can count them."""
    spec, prebuilt = run.spec, run.options.requests
    served, root = await discover_model(run.control, run.base_url, model)
    counter = ServerTokenCounter(run.control, run.base_url, served) if spec.endpoint == "chat" else None
    tokenizer = LazyTokenizer(run.options.tokenizer_path, served, root)
    if spec.sessions is not None:
        return Built(served, tokenizer, [], [])
    needed = planned_requests(spec, run.offsets)
    if prebuilt is None or len(prebuilt) < needed:
        prebuilt = await cached_requests(spec, tokenizer.get(), needed, False, counter, run.notes)
    warm = (
        await cached_requests(spec, tokenizer.get(), spec.warmup_requests, True, counter, run.notes)
        if spec.warmup_requests
        else []
    )
    return Built(served, tokenizer, warm, list(prebuilt[:needed]))


async def _measure(run: Run, built: Built, lc: LoadClient, warm: Phase) -> _Measured:
    """The measured phase: its requests prepared and connections opened, then its window between
    two scrapes of the server's /metrics, once the server showed it is alive."""
    watch = run.options.watch
    phase = prepared_phase(run.spec, built, lc, warmup=False)
    if watch is not None:
        watch.track(phase.records)
    await _preconnect(lc, _expected_concurrency(run.spec, warm.records), watch)
    before, sampler = await _scrape_before(run)
    window = await measured_window(run, lc, phase, sampler)
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


async def _scrape_before(run: Run) -> tuple[MetricsSnapshot | None, GaugeSampler | None]:
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


def _collect(
    run: Run, built: Built, warm: Phase, measured: _Measured, client_cpus: tuple[int, ...] | None
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
