"""The requests the tuner makes of a vLLM server besides the load, one function per endpoint.

Blocking, each on a fresh connection (`http.client`): for the thread that starts or keeps a
server, which has no event loop. `exchange` is also the request behind a live reconfiguration
(its path is `endpoints.RECONFIGURE`; `serving.process.reconfiguration` owns its protocol).

On an event loop, on an aiohttp session: each takes the caller's session, whose trace configs see
its requests (`loadgen.traced`: a request the server leaves unanswered counts towards a stall)
and whose keep-alive pool it fills; the prefix-cache reset, asked between load stages by callers
that hold no session, opens one for what watches them. aiohttp is imported where it is used:
importing the package costs nothing until a request."""

from __future__ import annotations

import asyncio
import http.client
import json
from typing import Any, Protocol

from vllm_http.endpoints import HEALTH, METRICS, MODELS, RESET_PREFIX_CACHE, TOKENIZE, BadStatus, TimedOut, Unanswered

RESET_ATTEMPTS = 5
RESET_RETRY_S = 0.25  # between resets the server refused while blocks were still held


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
        status, _ = exchange(host, port, "GET", HEALTH, timeout_s=timeout_s)
    except Unanswered:
        return False
    return status == 200


class SeesRequests(Protocol):
    """What watches the tuner's requests to a server (loadgen's `ProgressWatch`): it gives the
    `trace_configs` of an aiohttp session, one hook per request."""

    def trace_configs(self) -> list: ...


async def get_health(session, base_url: str, timeout_s: float) -> int:
    """GET /health, its answer read: the status. `TimedOut` when nothing came within `timeout_s`;
    `Unanswered` when the connection was refused or broke (the process gone, or not there)."""
    import aiohttp

    try:
        async with session.get(base_url + HEALTH, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            await resp.read()
            return resp.status
    except TimeoutError as e:
        raise TimedOut(f"GET {HEALTH}: no answer within {timeout_s:g} s") from e
    except (aiohttp.ClientError, OSError) as e:
        raise Unanswered(f"GET {HEALTH} failed ({e})") from e


async def served_models(session, base_url: str, timeout_s: float | None = None) -> list[dict[str, Any]]:
    """GET /v1/models: one entry per served model (`id`; `root`, usually the path the server
    loaded). `BadStatus` for an answer that is not a 200; `Unanswered` for none (nothing
    listens, not an OpenAI server, or no answer within `timeout_s`: None, the session's own)."""
    import aiohttp

    timeout = {} if timeout_s is None else {"timeout": aiohttp.ClientTimeout(total=timeout_s)}
    try:
        async with session.get(base_url + MODELS, **timeout) as resp:
            if resp.status != 200:
                raise BadStatus(f"GET {base_url}{MODELS} -> HTTP {resp.status}", resp.status)
            return (await resp.json())["data"]
    except (aiohttp.ClientError, OSError) as e:
        raise Unanswered(f"GET {MODELS} failed ({e})") from e


async def fetch_metrics_text(session, base_url: str, timeout_s: float = 10.0) -> str | None:
    """GET /metrics: the Prometheus text (`loadgen.server_metrics` reads it); None without a 200
    within `timeout_s`."""
    import aiohttp

    try:
        async with session.get(base_url + METRICS, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                return None
            return await resp.text()
    except (TimeoutError, aiohttp.ClientError, OSError):
        return None


async def count_chat_tokens(session, base_url: str, model: str, messages: list[dict[str, Any]]) -> int:
    """POST /tokenize: the prompt tokens of a chat's `messages` with the model's chat template
    applied, as the server counts them. `BadStatus` for an answer that is not a 200."""
    async with session.post(base_url + TOKENIZE, json={"model": model, "messages": messages}) as resp:
        if resp.status != 200:
            raise BadStatus(f"POST {TOKENIZE} -> HTTP {resp.status}: {(await resp.text())[:300]}", resp.status)
        return int((await resp.json())["count"])


async def reset_prefix_cache(base_url: str, watch: SeesRequests | None = None) -> bool | None:
    """POST /reset_prefix_cache (retried while blocks are still held): True once reset, False if
    still refused after `RESET_ATTEMPTS`, None where the server has no such endpoint
    (`RESET_ENDPOINT_ENV`) or gave no answer. `watch` sees the requests."""
    import aiohttp

    async with aiohttp.ClientSession(trace_configs=watch.trace_configs() if watch is not None else []) as session:
        for _ in range(RESET_ATTEMPTS):
            try:
                async with session.post(base_url + RESET_PREFIX_CACHE, timeout=aiohttp.ClientTimeout(total=10)) as resp:
                    if resp.status == 200:
                        body = await resp.read()  # older vLLM answers 200 with no body
                        if not body.strip() or json.loads(body).get("success"):
                            return True
                    elif resp.status != 409:  # 409: refused while blocks are held, retry
                        return None
            except (TimeoutError, aiohttp.ClientError, ValueError, AttributeError):
                return None
            await asyncio.sleep(RESET_RETRY_S)
    return False
