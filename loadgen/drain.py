"""Between load stages on one server: wait until it has drained (its `/metrics` gauges show
nothing running or waiting), so a stage does not start behind what the one before left queued.
The requests are `vllm_http`'s; the gauges are read by `server_metrics`, and the progress they
show is credited to the stall watch as the liveness check credits it (`liveness`)."""

from __future__ import annotations

import asyncio
import math
import time

from loadgen.liveness import credit_idle, engine_moved, reads_idle
from loadgen.server_metrics import GaugeSample, scan_gauges
from loadgen.stall import ProgressWatch, traced
from vllm_http import fetch_metrics_text

IDLE_POLL_S = 0.25
METRICS_TIMEOUT_S = 5.0  # for one read of /metrics


async def wait_idle(base_url: str, timeout_s: float, watch: ProgressWatch | None = None) -> tuple[float, str | None]:
    """Wait until the server runs and queues nothing. (seconds waited, a note if it never did).

    `watch` sees the polls, and the engine's progress they show: gauges that moved (requests
    let go of, KV blocks freed), or gauges at idle with a one-token request answered. A hung
    engine's gauges stand still, so the requests an aborted stage cut off stay owed
    (`loadgen.stall`)."""
    import aiohttp

    t0 = time.perf_counter()
    seen: GaugeSample | None = None
    async with aiohttp.ClientSession(trace_configs=traced(watch)) as session:
        while True:
            text = await fetch_metrics_text(session, base_url, timeout_s=METRICS_TIMEOUT_S)
            if text is None:
                return time.perf_counter() - t0, "no /metrics: did not wait for the server to drain"
            g = scan_gauges(text)
            if math.isnan(g.running):
                return time.perf_counter() - t0, "no request gauges in /metrics: did not wait to drain"
            if watch is not None and engine_moved(seen, g):
                watch.progress(g.t)
            if reads_idle(g):
                if watch is not None:
                    await credit_idle(watch, session, base_url)
                return time.perf_counter() - t0, None
            seen = g
            waited = time.perf_counter() - t0
            if waited > timeout_s:
                return waited, (
                    f"server still busy after {timeout_s:g} s ({g.running:.0f} running, "
                    f"{g.waiting:.0f} waiting): the next stage starts anyway"
                )
            await asyncio.sleep(IDLE_POLL_S)
