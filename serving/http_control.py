"""The tuner's HTTP requests to a running vLLM server, in one place: whether it answers
`GET /health`, waiting until it has drained (`/metrics`: nothing running or waiting), resetting
its prefix cache (`POST /reset_prefix_cache`), and the request behind a live reconfiguration
(`exchange`; `serving.process.reconfiguration` owns that route's protocol).

The drain and the reset run between load stages on an aiohttp session a `ProgressWatch` sees
(`loadgen.traced`: a request the server leaves unanswered counts towards a stall). The health
check and the reconfiguration are short blocking requests from the thread that starts or keeps a
server. What `/metrics` says is read by `loadgen` (`scan_gauges`); its text is fetched by
`vllm_http`, as loadgen's own scrapes are.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import math
import time
from typing import Any

from loadgen import (
    GaugeSample,
    ProgressWatch,
    credit_idle,
    engine_moved,
    reads_idle,
    scan_gauges,
    traced,
)
from vllm_http import fetch_metrics_text

IDLE_POLL_S = 0.25
RESET_ATTEMPTS = 5


class Unanswered(Exception):
    """No HTTP answer: nothing listens, the connection broke, or the time ran out."""


def exchange(
    host: str, port: int, method: str, path: str, *, json_body: Any = None, timeout_s: float
) -> tuple[int, bytes]:
    """One blocking request on a fresh connection: (status, body), or `Unanswered`."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        if json_body is None:
            conn.request(method, path)
        else:
            conn.request(method, path, body=json.dumps(json_body), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException) as e:
        raise Unanswered(str(e)) from e
    finally:
        conn.close()


def healthy(host: str, port: int, timeout_s: float = 2.0) -> bool:
    """Whether the server answers `GET /health` with 200."""
    try:
        status, _ = exchange(host, port, "GET", "/health", timeout_s=timeout_s)
    except Unanswered:
        return False
    return status == 200


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
