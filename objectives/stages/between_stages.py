"""Between two stages on one server: wait until it has drained, then reset its prefix cache."""

from __future__ import annotations

import asyncio
import json
import math
import time

from loadgen import (
    GaugeSample,
    ProgressWatch,
    credit_idle,
    engine_moved,
    fetch_metrics_text,
    reads_idle,
    scan_gauges,
    traced,
)

IDLE_POLL_S = 0.25
RESET_ATTEMPTS = 5


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
            text = await fetch_metrics_text(session, base_url, timeout_s=5)
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


# What a vLLM server needs in its environment to serve `POST /reset_prefix_cache`.
RESET_ENDPOINT_ENV = {"VLLM_SERVER_DEV_MODE": "1"}


async def reset_prefix_cache(base_url: str, watch: ProgressWatch | None = None) -> bool | None:
    """POST /reset_prefix_cache (retried while blocks are still held). None: not available.
    `watch` sees the requests."""
    import aiohttp

    async with aiohttp.ClientSession(trace_configs=traced(watch)) as session:
        for _ in range(RESET_ATTEMPTS):
            try:
                async with session.post(
                    base_url + "/reset_prefix_cache", timeout=aiohttp.ClientTimeout(total=10)
                ) as resp:
                    if resp.status == 200:
                        body = await resp.read()  # older vLLM answers 200 with no body
                        if not body.strip() or json.loads(body).get("success"):
                            return True
                    elif resp.status != 409:  # 409: refused while blocks are held, retry
                        return None
            except (TimeoutError, aiohttp.ClientError, ValueError, AttributeError):
                return None
            await asyncio.sleep(IDLE_POLL_S)
    return False
