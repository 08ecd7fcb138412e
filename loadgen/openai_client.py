"""The load client over the official `openai` SDK (`OpenAIClient`, `max_retries=0`, no connection
cap): the same records as the default client (`client.AiohttpClient`), for cross-checking. It
parses every chunk into objects and is slower (see docs/measurement.md for both clients'
ceilings). A room of its own: it shares only the stream's rules (`stream_record`) with the
default client.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import time
from typing import TYPE_CHECKING, Any

from loadgen.prompts import Request
from loadgen.request_record import (
    ABORTED,
    CLIENT_ERROR,
    CONNECTION,
    HTTP_ERROR,
    STREAM_ERROR,
    TIMEOUT,
    TRUNCATED,
    RequestRecord,
)
from loadgen.stream_record import TOKEN_DELTA_KEYS, apply_usage, close_stream

if TYPE_CHECKING:
    import openai


def sdk_http_library(openai: Any) -> Any:
    """The HTTP library the `openai` SDK is built on (httpx, or httpx2 in later SDKs), read from
    the SDK's own defaults: a stream cut short raises that library's transport errors unwrapped,
    and they need not be those of the httpx installed beside it."""
    return importlib.import_module(type(openai.DEFAULT_CONNECTION_LIMITS).__module__.partition(".")[0])


class OpenAIClient:
    """The official `openai` SDK, same records. Slower per chunk; for cross-checking."""

    name = "openai"

    def __init__(self, base_url: str, endpoint: str, request_timeout_s: float):
        self.base_url = base_url.rstrip("/")
        self.chat = endpoint == "chat"
        self.request_timeout_s = request_timeout_s
        self.client: openai.AsyncOpenAI | None = None

    async def __aenter__(self) -> OpenAIClient:
        import openai

        self._openai, self._httpx = openai, sdk_http_library(openai)
        limits = type(openai.DEFAULT_CONNECTION_LIMITS)(max_connections=None, max_keepalive_connections=None)
        http_client = openai.DefaultAsyncHttpxClient(limits=limits, timeout=openai.Timeout(self.request_timeout_s))
        client = self.client = openai.AsyncOpenAI(
            base_url=self.base_url + "/v1",
            api_key=os.environ.get("OPENAI_API_KEY", "EMPTY"),
            max_retries=0,
            timeout=self.request_timeout_s,
            http_client=http_client,
        )
        # The SDK's first request pays for lazy setup (~100 ms); pay it here, not in a TTFT.
        await client.models.list()
        self._create = client.chat.completions.create if self.chat else client.completions.create
        return self

    async def __aexit__(self, *exc) -> None:
        if self.client is not None:
            await self.client.close()
            self.client = None

    def prepare(self, request: Request, model: str, temperature: float | None) -> dict:
        body = request.body(model, temperature)
        extra = {"ignore_eos": body.pop("ignore_eos")}
        return {**body, "extra_body": extra}

    async def send(self, kwargs: dict, rec: RequestRecord) -> None:
        openai, httpx = self._openai, self._httpx
        perf = time.perf_counter
        times = rec.chunk_times
        got_usage = False
        rec.send_time = perf()
        try:
            create = self._create
            # asyncio.timeout bounds the whole stream, like aiohttp's total timeout.
            async with asyncio.timeout(self.request_timeout_s):
                stream = await create(**kwargs)
                rec.status = 200
                async for chunk in stream:
                    now = perf()
                    if chunk.choices:
                        if self.chat:
                            delta = chunk.choices[0].delta
                            if delta is None or not (
                                any(getattr(delta, k, None) for k in TOKEN_DELTA_KEYS)
                                or (delta.content == "" and not delta.role)
                            ):
                                continue
                        times.append(now)
                        if rec.answer is not None:
                            choice = chunk.choices[0]
                            rec.answer.append((choice.delta.content if self.chat else choice.text) or "")
                    if chunk.usage is not None:
                        apply_usage(chunk.usage.model_dump(), rec)
                        got_usage = True
            end = perf()
        except asyncio.CancelledError:
            rec.fail(ABORTED, "stopped by the load generator", perf())
            raise
        except (TimeoutError, openai.APITimeoutError, httpx.TimeoutException):
            rec.fail(TIMEOUT, f"no complete response within {self.request_timeout_s:g} s", perf())
            return
        except openai.APIStatusError as e:
            rec.status = e.status_code
            rec.fail(HTTP_ERROR, f"HTTP {e.status_code}: {e.message}", perf())
            return
        except (openai.APIConnectionError, httpx.TransportError) as e:
            rec.fail(CONNECTION if rec.status is None else TRUNCATED, repr(e), perf())
            return
        except openai.APIError as e:  # an error event inside the stream
            rec.fail(STREAM_ERROR, str(e), perf())
            return
        except Exception as e:
            rec.fail(CLIENT_ERROR, repr(e), perf())
            return
        # The SDK swallows [DONE]; the usage chunk (requested) is the end-of-stream evidence.
        close_stream(
            rec, times, end, None if got_usage else f"stream ended without usage after {len(times)} token chunks"
        )
