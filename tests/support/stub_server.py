"""A small OpenAI-compatible streaming server with pinned timing, for client tests and benchmarks.

Every stream: the first chunk `ttft_ms` after the request arrived, then one chunk per token
every `itl_ms` (absolute schedule, no drift), then the usage chunk and `data: [DONE]`. Chunk
bytes are precomputed, shaped like vLLM's, so the stub spends little CPU per chunk. With
`itl_ms` 0 the whole stream goes out in one socket write (still one SSE message per token).

Faults, for error accounting, picked per request by its `max_tokens` (`faults_by_max_tokens`,
so a workload class can carry them) or by arrival count (`fault_every`):
`http:<status>`, `stall` (headers sent, then nothing), `stall_headers` (nothing at all),
`truncate:<k>` (k chunks, then the connection is cut mid-stream), `eof:<k>` (k chunks, then a
clean end without [DONE]), `error_event` (one chunk, then an SSE error event), `no_token`
(only usage and [DONE]), `drop` (connection closed before any response). `freeze_after_s`
hangs everything a while after the first request, streams, new requests and /health (a
stopped server).

Also serves `/v1/models`, `/health`, `/tokenize` (with a local tokenizer), a vLLM-shaped
`/metrics` whose counters follow the traffic, and vLLM's dev `POST /reset_prefix_cache`.

For load stages (`objectives.stages`): `slots` bounds the streams served at once (the others
queue, reported as waiting: a server with a real capacity of `slots` / stream time),
`busy_after_s` keeps the request gauges busy for a while after the last request ended (a server
still draining), `StubApp.pin_gauges` holds them at given values for a while,
`reset_prefix_cache` picks how the reset endpoint answers (absent, `success: false` a few times
first, or an empty 200), `cancel_on_disconnect` drops a stream whose client hung up (an aborted
stage's), and `record_events` keeps a time line (`time.perf_counter()`: comparable with the
client's records, since the stub runs in-process).

Run as a process:
`python -m tests.support.stub_server --port 0 --ttft-ms 10 --itl-ms 5 --chunks 16 [--uvloop]`
prints `PORT <n>` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import threading
import time
from dataclasses import dataclass, field

from aiohttp import web

MODEL = "stub-model"


@dataclass
class StubConfig:
    ttft_ms: float = 20.0
    itl_ms: float = 5.0
    chunks: int | None = None  # tokens per stream; None: the request's max_tokens
    model: str = MODEL
    root: str | None = None  # reported by /v1/models (a tokenizer directory)
    faults_by_max_tokens: dict[int, str] = field(default_factory=dict)
    fault_every: int = 0
    # Streams of fewer tokens go out in one write, as a fast decode's coalesced deltas reach a
    # client (vLLM on a bf16 CPU): the client cannot time their decode.
    burst_below_tokens: int = 0
    fault_kind: str = "http:500"
    record_bodies: bool = False
    # SSE shapes a client must cope with:
    role_at_arrival: bool = False  # chat: the role-only opener at once, long before the first token
    comments: bool = False  # a ": keep-alive" comment before every chunk
    split_chunks: bool = False  # every chunk written in two halves, 1 ms apart
    crlf: bool = False  # "\r\n" line endings
    empty_final_delta: bool = False  # chat: a closing chunk with `delta: {}` (carries no token)
    # Load stages:
    slots: int = 0  # streams served at once (0: unlimited); the rest wait, ttft_ms counts from a slot
    busy_after_s: float = 0.0  # /metrics: running >= 1 until this long after the last request ended
    # "ok"; "absent" (404); "busy:<k>" (success false k times first); "empty" (200, no body: vLLM
    # versions that did not report the outcome)
    reset_prefix_cache: str = "ok"
    metrics_enabled: bool = True  # False: /metrics answers 404
    cancel_on_disconnect: bool = False  # stop a stream whose client hung up (as vLLM aborts it)
    record_events: bool = False  # Stats.events: ("arrive" | "end" | "reset" | "idle", perf_counter)
    # A hung server (as after SIGSTOP): this long after the first request (warm-up included),
    # every stream stops mid-way and no request of any kind gets an answer.
    freeze_after_s: float | None = None
    # Only the engine hangs (deadlocked behind a live API server): /health, /v1/models, /tokenize
    # and /metrics still answer, the gauges with the last figures an engine stopped between two
    # requests sent (idle); streams stop and completions get nothing.
    freeze_engine_only: bool = False


_COMPLETION = (
    b'data: {"id":"cmpl-stub","object":"text_completion","created":0,"model":"%s",'
    b'"choices":[{"index":0,"text":" tok","logprobs":null,"finish_reason":%s,'
    b'"stop_reason":null}]}\n\n'
)
_CHAT_ROLE = (
    b'data: {"id":"chatcmpl-stub","object":"chat.completion.chunk","created":0,'
    b'"model":"%s","choices":[{"index":0,"delta":{"role":"assistant","content":""},'
    b'"logprobs":null,"finish_reason":null}]}\n\n'
)
_CHAT = (
    b'data: {"id":"chatcmpl-stub","object":"chat.completion.chunk","created":0,"model":"%s",'
    b'"choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":%s}]}\n\n'
)
_CHAT_EMPTY = (
    b'data: {"id":"chatcmpl-stub","object":"chat.completion.chunk","created":0,'
    b'"model":"%s","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]}\n\n'
)
_USAGE = (
    'data: {{"id":"stub","object":"{obj}","created":0,"model":"{model}","choices":[],'
    '"usage":{{"prompt_tokens":{p},"total_tokens":{t},"completion_tokens":{c}}}}}\n\n'
)
_DONE = b"data: [DONE]\n\n"
_ERROR_EVENT = b'data: {"error":{"message":"stub: injected engine error","type":"InternalServerError","code":500}}\n\n'


class Stats:
    def __init__(self):
        self.requests = 0
        self.in_flight = 0
        self.completed = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.max_in_flight = 0
        self.health_checks = 0
        self.bodies: list[dict] = []
        self.resets = 0  # POST /reset_prefix_cache calls
        self.reset_successes = 0
        self.last_end = float("-inf")  # perf_counter when the last request ended (any outcome)
        self.events: list[tuple[str, float]] = []  # with StubConfig.record_events
        self.waiting = 0  # requests queued for a slot (StubConfig.slots)


class StubApp:
    def __init__(self, config: StubConfig, tokenizer=None):
        self.config = config
        self.tokenizer = tokenizer
        self.stats = Stats()
        m = config.model.encode()
        self._completion = _COMPLETION % (m, b"null")
        self._completion_last = _COMPLETION % (m, b'"length"')
        self._chat_role = _CHAT_ROLE % m
        self._chat = _CHAT % (m, b"null")
        self._chat_last = _CHAT % (m, b'"length"')
        self._pinned = (0.0, 0.0, float("-inf"))  # (running, waiting, until perf_counter)
        self._slots: asyncio.Semaphore | None = None  # created on the stub's loop
        self.first_request: float | None = None  # perf_counter

    def frozen(self) -> bool:
        c = self.config
        return (
            c.freeze_after_s is not None
            and self.first_request is not None
            and time.perf_counter() >= self.first_request + c.freeze_after_s
        )

    @property
    def frozen_at(self) -> float | None:
        """perf_counter when the stub froze (StubConfig.freeze_after_s), once it has."""
        return self.first_request + self.config.freeze_after_s if self.frozen() else None

    async def _hang_if_frozen(self, api: bool = False) -> None:
        """Hang, once frozen; `api`: an answer of the API server's own, given while only the
        engine is frozen."""
        while self.frozen() and not (api and self.config.freeze_engine_only):
            await asyncio.sleep(3600)

    def pin_gauges(self, running: float = 0.0, waiting: float = 0.0, for_s: float = 1.0) -> None:
        """/metrics reports at least these gauges for the next `for_s` seconds (any thread)."""
        self._pinned = (float(running), float(waiting), time.perf_counter() + for_s)

    def gauges(self) -> tuple[float, float]:
        """(running, waiting) as /metrics reports them now."""
        s, c = self.stats, self.config
        now = time.perf_counter()
        running, waiting = float(s.in_flight), float(s.waiting)
        if c.busy_after_s and now < s.last_end + c.busy_after_s:
            running = max(running, 1.0)
        pin_running, pin_waiting, until = self._pinned
        if now < until:
            running, waiting = running + pin_running, waiting + pin_waiting
        return running, waiting

    def _event(self, kind: str) -> None:
        if self.config.record_events:
            self.stats.events.append((kind, time.perf_counter()))

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/tokenize", self.tokenize)
        if self.config.reset_prefix_cache != "absent":
            app.router.add_post("/reset_prefix_cache", self.reset_prefix_cache)
        return app

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        await self._hang_if_frozen()
        s = self.stats
        s.resets += 1
        self._event("reset")
        kind, _, arg = self.config.reset_prefix_cache.partition(":")
        if kind == "empty":
            s.reset_successes += 1
            return web.Response(status=200)
        if kind == "busy" and s.resets <= int(arg):
            return web.json_response({"success": False})
        s.reset_successes += 1
        return web.json_response({"success": True})

    async def health(self, request: web.Request) -> web.Response:
        self.stats.health_checks += 1
        await self._hang_if_frozen(api=True)
        return web.Response(text="")

    async def models(self, request: web.Request) -> web.Response:
        await self._hang_if_frozen(api=True)
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.config.model,
                        "object": "model",
                        "root": self.config.root or self.config.model,
                        "max_model_len": 4096,
                    }
                ],
            }
        )

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        await self._hang_if_frozen(api=True)
        if self.tokenizer is None:
            return web.json_response({"error": "no tokenizer"}, status=501)
        if "messages" in body:
            count = self.tokenizer.count_chat(body["messages"])
        else:
            count = len(self.tokenizer.encode(body["prompt"]))
        return web.json_response({"count": count, "max_model_len": 4096, "tokens": []})

    async def metrics(self, request: web.Request) -> web.Response:
        await self._hang_if_frozen(api=True)
        if not self.config.metrics_enabled:
            return web.Response(status=404, text="404: Not Found")
        s = self.stats
        labels = f'engine="0",model_name="{self.config.model}"'
        running, waiting = (0.0, 0.0) if self.frozen() else self.gauges()
        if running == 0 and waiting == 0:
            self._event("idle")
        lines = [
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} {running}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{labels}}} {waiting}",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{labels}}} {min(1.0, s.in_flight / 100):.4f}",
            "# TYPE vllm:num_preemptions_total counter",
            f"vllm:num_preemptions_total{{{labels}}} 0.0",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{labels}}} {float(s.prompt_tokens)}",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{labels}}} {float(s.generation_tokens)}",
            "# TYPE vllm:prefix_cache_queries_total counter",
            f"vllm:prefix_cache_queries_total{{{labels}}} {float(s.prompt_tokens)}",
            "# TYPE vllm:prefix_cache_hits_total counter",
            f"vllm:prefix_cache_hits_total{{{labels}}} {float(s.prompt_tokens // 2)}",
            "# TYPE vllm:request_success_total counter",
            f'vllm:request_success_total{{{labels},finished_reason="length"}} {float(s.completed)}',
            "# TYPE vllm:request_queue_time_seconds histogram",
        ]
        for le in ("0.001", "0.01", "0.1", "1.0", "+Inf"):
            lines.append(f'vllm:request_queue_time_seconds_bucket{{{labels},le="{le}"}} {float(s.completed)}')
        lines += [
            f"vllm:request_queue_time_seconds_count{{{labels}}} {float(s.completed)}",
            f"vllm:request_queue_time_seconds_sum{{{labels}}} {s.completed * 0.0005}",
        ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def _write(self, resp: web.StreamResponse, data: bytes) -> None:
        await self._hang_if_frozen()
        c = self.config
        if not (c.comments or c.split_chunks or c.crlf):
            await resp.write(data)
            return
        if c.crlf:
            data = data.replace(b"\n", b"\r\n")
        if c.comments:
            await resp.write(b": keep-alive\r\n\r\n" if c.crlf else b": keep-alive\n\n")
        if c.split_chunks:
            half = len(data) // 2
            await resp.write(data[:half])
            await asyncio.sleep(0.001)
            data = data[half:]
        await resp.write(data)

    def _fault(self, max_tokens: int) -> str | None:
        fault = self.config.faults_by_max_tokens.get(max_tokens)
        if fault is None and self.config.fault_every and self.stats.requests % self.config.fault_every == 0:
            fault = self.config.fault_kind
        return fault

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, chat=True)

    async def _stream(self, request: web.Request, chat: bool) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        t_arrival = loop.time()
        body = json.loads(await request.read())
        s = self.stats
        if self.first_request is None:
            self.first_request = time.perf_counter()
        await self._hang_if_frozen()
        s.requests += 1
        self._event("arrive")
        if self.config.record_bodies:
            s.bodies.append(body)
        max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
        n = self.config.chunks or max_tokens
        fault = self._fault(max_tokens)
        if chat:
            prompt_tokens = self.tokenizer.count_chat(body["messages"]) if self.tokenizer else 0
        else:
            prompt = body.get("prompt")
            prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        if fault is not None:
            kind, _, arg = fault.partition(":")
            if kind == "http":
                return web.json_response(
                    {"error": {"message": f"stub: injected HTTP {arg}", "code": int(arg)}}, status=int(arg)
                )
            if kind == "drop":
                request.transport.close()
                await asyncio.sleep(3600)
            if kind == "stall_headers":
                await asyncio.sleep(3600)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if fault == "stall":
            await asyncio.sleep(3600)
        slot = None
        if self.config.slots:
            if self._slots is None:
                self._slots = asyncio.Semaphore(self.config.slots)
            slot = self._slots
            s.waiting += 1
            try:
                await slot.acquire()
            finally:
                s.waiting -= 1
            t_arrival = loop.time()  # the stream's schedule starts once it has a slot
        s.in_flight += 1
        s.max_in_flight = max(s.max_in_flight, s.in_flight)
        try:
            stop_after = n
            if fault and fault.split(":")[0] in ("truncate", "eof"):
                stop_after = int(fault.split(":")[1])
            if fault == "error_event":
                stop_after = 1
            if fault == "no_token":
                stop_after = 0
            ttft, itl = self.config.ttft_ms / 1000, self.config.itl_ms / 1000
            chunk, last = (self._chat, self._chat_last) if chat else (self._completion, self._completion_last)
            c = self.config
            if (
                (itl == 0 or n < c.burst_below_tokens)
                and fault is None
                and not (c.role_at_arrival or c.comments or c.split_chunks or c.crlf or c.empty_final_delta)
            ):
                # Burst: the whole stream in one write once the first token is due (separate SSE
                # messages, one socket write): the cheapest stream a client can get.
                delay = t_arrival + ttft - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                usage = _USAGE.format(
                    obj="chat.completion.chunk" if chat else "text_completion",
                    model=c.model,
                    p=prompt_tokens,
                    t=prompt_tokens + n,
                    c=n,
                )
                await resp.write((self._chat_role if chat else b"") + chunk * (n - 1) + last + usage.encode() + _DONE)
                await resp.write_eof()
                s.completed += 1
                s.prompt_tokens += prompt_tokens
                s.generation_tokens += n
                return resp
            if chat and self.config.role_at_arrival:
                await self._write(resp, self._chat_role)
            for k in range(min(n, stop_after)):
                due = t_arrival + ttft + k * itl
                delay = due - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                if k == 0 and chat and not self.config.role_at_arrival:
                    await self._write(resp, self._chat_role)
                await self._write(resp, last if k == n - 1 else chunk)
            if fault and fault.startswith("truncate"):
                request.transport.close()  # mid-chunked-encoding: the client sees a broken stream
                return resp
            if fault and fault.startswith("eof"):
                await resp.write_eof()
                return resp
            if chat and self.config.empty_final_delta:
                await self._write(resp, _CHAT_EMPTY % self.config.model.encode())
            if fault == "error_event":
                await self._write(resp, _ERROR_EVENT)
            produced = 0 if fault in ("no_token", "error_event") else n
            usage = _USAGE.format(
                obj="chat.completion.chunk" if chat else "text_completion",
                model=self.config.model,
                p=prompt_tokens,
                t=prompt_tokens + produced,
                c=produced,
            )
            await self._write(resp, usage.encode())
            await self._write(resp, _DONE)
            await resp.write_eof()
            s.completed += 1
            s.prompt_tokens += prompt_tokens
            s.generation_tokens += produced
            return resp
        finally:
            s.in_flight -= 1
            if slot is not None:
                slot.release()
            s.last_end = time.perf_counter()
            self._event("end")


class StubServer:
    """The stub on a background thread with its own event loop (for tests)."""

    def __init__(self, config: StubConfig | None = None, tokenizer=None):
        self.stub = StubApp(config or StubConfig(), tokenizer)
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def stats(self) -> Stats:
        return self.stub.stats

    def __enter__(self) -> StubServer:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        async def start() -> None:
            self._runner = web.AppRunner(
                self.stub.app(),
                access_log=None,
                shutdown_timeout=0.1,
                handler_cancellation=self.stub.config.cancel_on_disconnect,
            )
            await self._runner.setup()
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
            site = web.SockSite(self._runner, sock)
            await site.start()

        def main() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=main, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("stub server did not start")
        return self

    def __exit__(self, *exc) -> None:
        async def stop() -> None:
            await self._runner.cleanup()

        fut = asyncio.run_coroutine_threadsafe(stop(), self._loop)
        try:
            fut.result(10)
        except Exception:
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--itl-ms", type=float, default=5.0)
    p.add_argument("--chunks", type=int, default=None)
    p.add_argument("--model", default=MODEL)
    p.add_argument("--tokenizer", default=None, help="directory: serve /tokenize and chat usage counts")
    p.add_argument("--uvloop", action="store_true")
    args = p.parse_args(argv)
    tokenizer = None
    if args.tokenizer:
        from loadgen.tokenizer import PromptTokenizer

        tokenizer = PromptTokenizer.load(args.tokenizer)
    stub = StubApp(
        StubConfig(ttft_ms=args.ttft_ms, itl_ms=args.itl_ms, chunks=args.chunks, model=args.model, root=args.tokenizer),
        tokenizer,
    )

    async def serve() -> None:
        runner = web.AppRunner(stub.app(), access_log=None)
        await runner.setup()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", args.port))
        await web.SockSite(runner, sock, backlog=4096).start()
        print(f"PORT {sock.getsockname()[1]}", flush=True)
        await asyncio.Event().wait()

    if args.uvloop:
        import uvloop

        uvloop.run(serve())
    else:
        asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
