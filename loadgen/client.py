"""Streaming clients that send one prepared request and fill in its `RequestRecord`: what a load
run asks of one (`LoadClient`), the client chosen by name (`make_client`), and the default.

`AiohttpClient` (the default) reads the SSE stream itself with as little work per chunk as
possible: one `perf_counter()` per socket read, and a byte test per message to tell token
chunks from the role opener, the usage chunk and `[DONE]`; only those rare messages are
JSON-parsed. `OpenAIClient` (`openai_client`) uses the official SDK and produces the same
records, for cross-checking. Both classify chunks and close a stream by the same rules
(`stream_record`).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from loadgen.openai_client import OpenAIClient
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
from vllm_http import Unanswered, get_health

if TYPE_CHECKING:
    import aiohttp
    import yarl

READ_BUFSIZE = 4 * 2**20  # aiohttp's 64 KiB default throttles long streams
PRECONNECT_TIMEOUT_S = 10.0  # for each GET /health that opens a keep-alive connection
PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
_OTHER_DELTA_KEYS = (b'"reasoning', b'"tool_calls"', b'"function_call"')
_USAGE_FIELD = re.compile(rb'"(prompt|completion)_tokens":\s*(\d+)')


class LoadClient(Protocol):
    name: str

    async def __aenter__(self) -> LoadClient: ...

    async def __aexit__(self, *exc) -> None: ...

    def prepare(self, request: Request, model: str, temperature: float | None) -> Any: ...

    async def send(self, prepared: Any, rec: RequestRecord) -> None: ...


def _auth_headers() -> dict[str, str]:
    key = os.environ.get("OPENAI_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


def _chat_delta_has_token(delta: dict) -> bool:
    if any(delta.get(k) for k in TOKEN_DELTA_KEYS):
        return True
    return delta.get("content") == "" and not delta.get("role")


def _delta_text(payload: bytes, chat: bool) -> str:
    """The text a token chunk adds to the answer."""
    choices = json.loads(payload).get("choices") or [{}]
    if chat:
        return (choices[0].get("delta") or {}).get("content") or ""
    return choices[0].get("text") or ""


class AiohttpClient:
    name = "aiohttp"

    def __init__(self, base_url: str, endpoint: str, request_timeout_s: float):
        self.base_url = base_url.rstrip("/")
        self.path = PATHS[endpoint]
        self.chat = endpoint == "chat"
        self.request_timeout_s = request_timeout_s
        self.session: aiohttp.ClientSession | None = None
        self._url: yarl.URL | None = None
        self._headers = {"Content-Type": "application/json", **_auth_headers()}
        self._deadlines: dict[asyncio.Task, float] = {}
        self._expired: set[asyncio.Task] = set()
        self._watchdog: asyncio.Task | None = None

    async def __aenter__(self) -> AiohttpClient:
        import aiohttp
        import yarl

        self._aiohttp = aiohttp
        self._url = yarl.URL(self.base_url + self.path)  # parsed once, not per request
        # limit=0: no client-side connection cap (aiohttp's default of 100 silently caps concurrency).
        # keepalive 4 s: below uvicorn's 5 s (vLLM), so an idle connection is dropped here before
        # the server closes it under a request.
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=4, ttl_dns_cache=300)
        self.session = aiohttp.ClientSession(
            connector=connector,
            read_bufsize=READ_BUFSIZE,
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=None),
        )
        self._watchdog = asyncio.ensure_future(self._expire_overdue())
        return self

    async def __aexit__(self, *exc) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self.session is not None:
            await self.session.close()
            self.session = None

    def _open(self) -> tuple[aiohttp.ClientSession, yarl.URL]:
        """The session and the endpoint's URL, which exist between `__aenter__` and `__aexit__`."""
        if self.session is None or self._url is None:
            raise RuntimeError("the client is not open: send inside `async with` it")
        return self.session, self._url

    async def preconnect(self, n: int) -> int:
        """Open up to n keep-alive connections now (n concurrent GET /health), so the run's first
        requests do not pay TCP setup, in their TTFT and in a burst of client CPU."""
        session, _ = self._open()

        async def ping() -> bool:
            try:
                await get_health(session, self.base_url, PRECONNECT_TIMEOUT_S)
            except Unanswered:
                return False
            return True

        return sum(await asyncio.gather(*(ping() for _ in range(n))))

    async def _expire_overdue(self) -> None:
        """Request timeouts: one periodic check for all requests in flight, instead of a timer
        per request (aiohttp's per-request timeout costs ~10 % of the client's CPU)."""
        period = min(1.0, max(0.02, self.request_timeout_s / 10))
        while True:
            await asyncio.sleep(period)
            now = time.perf_counter()
            for task, deadline in list(self._deadlines.items()):
                if now > deadline and task not in self._expired:
                    self._expired.add(task)
                    task.cancel()

    def prepare(self, request: Request, model: str, temperature: float | None) -> bytes:
        return request.encoded_body(model, temperature)

    def _control(self, payload: bytes, rec: RequestRecord) -> None:
        """A message that is not a plain token chunk: usage, an error event, or something unknown."""
        if b'"error"' not in payload:  # the usage chunk: two integers, no JSON parse needed
            for key, value in _USAGE_FIELD.findall(payload):
                if key == b"prompt":
                    rec.prompt_tokens = int(value)
                else:
                    rec.completion_tokens = int(value)
            return
        try:
            obj = json.loads(payload)
        except ValueError:
            return
        if not isinstance(obj, dict):
            return
        if obj.get("error") is not None and not obj.get("choices"):
            err = obj["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            rec.error_kind = STREAM_ERROR
            rec.error_text = str(msg)[:500]
            return
        apply_usage(obj.get("usage"), rec)

    @staticmethod
    def _role_only(payload: bytes) -> bool:
        """The chat opener `delta: {role, content: ""}` carries no token (vLLM 0.33's rule)."""
        if b'"content":""' in payload and not any(k in payload for k in _OTHER_DELTA_KEYS):
            return True
        obj = json.loads(payload)
        choices = obj.get("choices") or [{}]
        return not _chat_delta_has_token(choices[0].get("delta") or {})

    async def send(self, body: bytes, rec: RequestRecord) -> None:
        perf = time.perf_counter
        aiohttp = self._aiohttp
        session, url = self._open()
        task = asyncio.current_task()
        if task is None:  # its deadline cancels the task that sends
            raise RuntimeError("send runs in a task of the event loop")
        rec.send_time = perf()
        self._deadlines[task] = rec.send_time + self.request_timeout_s
        try:
            async with session.post(url, data=body, headers=self._headers) as resp:
                rec.status = resp.status
                if resp.status != 200:
                    text = await resp.text(errors="replace")
                    rec.fail(HTTP_ERROR, f"HTTP {resp.status}: {text}", perf())
                    return
                done = await self._read_stream(resp.content, rec)
            end = perf()
        except asyncio.CancelledError:
            if task in self._expired:  # our timeout, not the caller's cancel
                self._expired.discard(task)
                task.uncancel()
                rec.fail(TIMEOUT, f"no complete response within {self.request_timeout_s:g} s", perf())
                return
            rec.fail(ABORTED, "stopped by the load generator", perf())
            raise
        except aiohttp.ClientPayloadError as e:
            rec.fail(TRUNCATED, f"stream broken: {e!r}", perf())
            return
        except (aiohttp.ClientConnectionError, OSError) as e:
            rec.fail(CONNECTION if rec.status is None else TRUNCATED, repr(e), perf())
            return
        except Exception as e:
            rec.fail(CLIENT_ERROR, repr(e), perf())
            return
        finally:
            self._deadlines.pop(task, None)
        times = rec.chunk_times
        if rec.error_kind is not None:  # an error event inside the stream
            rec.end_time = end
        else:
            close_stream(
                rec, times, end, None if done else f"stream ended before [DONE] after {len(times)} token chunks"
            )

    async def _read_stream(self, content: aiohttp.StreamReader, rec: RequestRecord) -> bool:
        """Read a 200 response's SSE stream into `rec`: the time each token chunk arrived (its
        text too, for a session's turn), the usage, an error event. Whether `[DONE]` ended it.

        One `perf_counter()` per socket read, and a byte test per message; only the rare
        messages that are not plain token chunks are JSON-parsed."""
        perf = time.perf_counter
        times = rec.chunk_times
        chat = self.chat
        done = False
        buf = b""
        while True:
            data = await content.readany()
            if not data:
                return done
            now = perf()
            if buf:
                data = buf + data
            if b"\r" in data:
                data = data.replace(b"\r\n", b"\n")
            *messages, buf = data.split(b"\n\n")
            for msg in messages:
                if msg.startswith(b"data:"):
                    payload = msg[5:]
                else:  # comment (keep-alive), or other SSE fields before data:
                    cut = msg.find(b"\ndata:")
                    if cut < 0:
                        continue
                    payload = msg[cut + 6 :]
                payload = payload.strip()
                if payload[:1] != b"{":
                    if payload == b"[DONE]":
                        done = True
                    continue
                if b'"choices":[]' in payload or b'"choices": []' in payload or b'"choices"' not in payload:
                    self._control(payload, rec)
                    continue
                if chat:
                    if b'"role"' in payload:
                        if self._role_only(payload):
                            continue
                    elif b'"content":' not in payload and not any(k in payload for k in _OTHER_DELTA_KEYS):
                        continue  # e.g. an empty closing delta: no token
                times.append(now)
                if rec.answer is not None:  # a session's turn: a later turn resends its text
                    rec.answer.append(_delta_text(payload, chat))
                if b'"usage":{' in payload or b'"usage": {' in payload:
                    self._control(payload, rec)  # continuous_usage_stats


CLIENTS: dict[str, Callable[[str, str, float], LoadClient]] = {"aiohttp": AiohttpClient, "openai": OpenAIClient}


def make_client(name: str, base_url: str, endpoint: str, request_timeout_s: float) -> LoadClient:
    try:
        cls = CLIENTS[name]
    except KeyError:
        raise ValueError(f"unknown client {name!r}; choose one of {', '.join(CLIENTS)}") from None
    return cls(base_url, endpoint, request_timeout_s)
