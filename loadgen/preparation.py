"""What a load run prepares before it sends: the served model (`discover_model`) and its tokenizer,
the workload's requests (chat prompts checked against the server's `/tokenize` and realigned there
if the local count disagrees; built once per workload shape and cached, so a study's trials reuse
them, and built ahead where the caller knows the workload before the server answers:
`prepare_requests`), and the pool of prepared bodies and records the dispatch loops draw from;
the error that stops a run it cannot prepare (`LoadRunError`)."""

from __future__ import annotations

import asyncio
import math
import threading
from pathlib import Path
from typing import Any

from loadgen.prompts import Request, build_requests, plan_requests, realize_async
from loadgen.request_record import RequestRecord
from loadgen.tokenizer import PromptTokenizer, TokenizerError
from loadgen.workload import WorkloadSpec
from vllm_http import BadStatus, Unanswered, count_chat_tokens, served_models

CHAT_PROBE_REQUESTS = 8  # chat prompts whose local count is checked against /tokenize
ALIGN_CONCURRENCY = 16
CLOSED_LOOP_BATCH = 256  # duration-bounded closed loops build requests in batches of this size


class LoadRunError(RuntimeError):
    """A load run that cannot be made: the server serves no model or cannot be reached, its
    /tokenize refuses the prompts, or the workload gives nothing to send."""


async def discover_model(session, base_url: str, model: str | None = None) -> tuple[str, str | None]:
    """(served model id, its `root`: usually the path the server loaded) from GET /v1/models.

    Without `model`, the first served model; with it, that model's root (None if not listed).
    """
    try:
        data = await served_models(session, base_url)
    except BadStatus as e:
        raise LoadRunError(str(e)) from None
    except Unanswered as e:  # nothing listens there, or not an OpenAI server
        raise LoadRunError(f"cannot reach {base_url}: {e}") from None
    if not data:
        raise LoadRunError(f"{base_url} serves no model")
    if model is None:
        return data[0]["id"], data[0].get("root")
    return model, next((d.get("root") for d in data if d["id"] == model), None)


def _tokenizer_for(tokenizer_path: str | Path | None, model: str, root: str | None) -> PromptTokenizer:
    for candidate in (tokenizer_path, root, model):
        if candidate and Path(candidate).expanduser().is_dir():
            return load_tokenizer(candidate)
    raise TokenizerError(
        f"no local tokenizer for model {model!r} (root {root!r}); pass tokenizer_path "
        "(a directory with tokenizer.json or tokenizer files)"
    )


class ServerTokenCounter:
    """Counts chat prompt tokens with the server's `/tokenize` (template applied by the server)."""

    def __init__(self, session, base_url: str, model: str):
        self.session, self.base_url, self.model = session, base_url, model
        self.semaphore = asyncio.Semaphore(ALIGN_CONCURRENCY)

    async def __call__(self, messages) -> int:
        async with self.semaphore:
            try:
                return await count_chat_tokens(self.session, self.base_url, self.model, messages)
            except BadStatus as e:
                raise LoadRunError(str(e)) from None


_BUILD_CACHE: dict[tuple, list[Request]] = {}
_BUILD_CACHE_SIZE = 16  # a trial's stages each build their own slice
# The workload's request streams as counted with the local tokenizer, per (workload shape,
# tokenizer, warm-up or measured): request i depends on the seed and i alone
# (`prompts.plan_requests`), so a stream is built once and extended, and a run that needs its
# first n takes them from here, whether `prepare_requests` built them ahead or the run does.
_LOCAL_BUILDS: dict[tuple, list[Request]] = {}
# A stream is extended by one thread at a time: a build left running by a server start that
# failed must not extend it beside the retry's (each would append the same requests).
_LOCAL_BUILDS_LOCK = threading.Lock()
_TOKENIZERS: dict[Path, PromptTokenizer] = {}


def _shape_key(spec: WorkloadSpec, tokenizer: PromptTokenizer) -> tuple:
    # Requests depend on these only (not on arrivals or bounds): trials of a study reuse them,
    # each load stage its own slice of the sequence.
    shape = spec.model_dump_json(include={"endpoint", "classes", "seed", "trace", "first_request"})
    return shape, tuple(spec.class_names), tokenizer.fingerprint


def _cache_key(spec: WorkloadSpec, tokenizer: PromptTokenizer, n: int, warmup: bool, server_checked: bool) -> tuple:
    return *_shape_key(spec, tokenizer), n, warmup, server_checked


def _first(spec: WorkloadSpec, warmup: bool) -> int:
    """Where a run's requests start in their stream: the warm-up's at 0, the measured ones at the
    run's slice."""
    return 0 if warmup else spec.first_request


def local_requests(spec: WorkloadSpec, tokenizer: PromptTokenizer, n: int, warmup: bool) -> list[Request]:
    """The run's first n warm-up or measured requests (from its slice), counted locally."""
    key = (*_shape_key(spec, tokenizer), warmup)
    with _LOCAL_BUILDS_LOCK:
        built = _LOCAL_BUILDS.get(key)
        if built is None:
            if len(_LOCAL_BUILDS) >= _BUILD_CACHE_SIZE:
                _LOCAL_BUILDS.pop(next(iter(_LOCAL_BUILDS)))
            built = _LOCAL_BUILDS[key] = []
        if len(built) < n:
            start = _first(spec, warmup) + len(built)
            built.extend(build_requests(spec, tokenizer, n - len(built), warmup=warmup, start=start))
        return built[:n]


def load_tokenizer(path: str | Path) -> PromptTokenizer:
    """A local tokenizer, loaded once per directory in this process (its derived tables with it)."""
    key = Path(path).expanduser().resolve()
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = PromptTokenizer.load(key)
    return _TOKENIZERS[key]


def planned_requests(spec: WorkloadSpec, offsets: list[float] | None) -> int:
    """How many measured requests a run sends: one per arrival of an open loop; a closed loop's
    `num_requests`, or a first batch where its duration bounds it."""
    return len(offsets) if offsets is not None else (spec.num_requests or CLOSED_LOOP_BATCH)


def prepare_requests(spec: WorkloadSpec, tokenizer_path: str | Path) -> int:
    """Build the requests a run of `spec` sends (its warm-up and measured ones, counted with the
    local tokenizer at `tokenizer_path`) before the run, e.g. while its server starts: the run then
    finds them built (`local_requests`) and only checks a few against the server's /tokenize.
    How many were built; 0 where only the server can count them (chat without a local template)."""
    tokenizer = load_tokenizer(tokenizer_path)
    if spec.endpoint == "chat" and not tokenizer.can_render_chat:
        return 0
    offsets = None
    if spec.arrival.mode != "closed":
        offsets = spec.schedule().tolist()
    n = planned_requests(spec, offsets)
    local_requests(spec, tokenizer, spec.warmup_requests, True)
    local_requests(spec, tokenizer, n, False)
    return spec.warmup_requests + n


async def cached_requests(
    spec: WorkloadSpec,
    tokenizer: PromptTokenizer,
    n: int,
    warmup: bool,
    counter: ServerTokenCounter | None,
    notes: list[str],
) -> list[Request]:
    """Built once per (workload shape, tokenizer, n) in this process; deterministic, so cached."""
    key = _cache_key(spec, tokenizer, n, warmup, counter is not None)
    if key not in _BUILD_CACHE:
        if len(_BUILD_CACHE) >= _BUILD_CACHE_SIZE:
            _BUILD_CACHE.pop(next(iter(_BUILD_CACHE)))
        _BUILD_CACHE[key] = await _build_uncached(spec, tokenizer, n, warmup, counter, notes)
    return _BUILD_CACHE[key]


async def _build_uncached(
    spec: WorkloadSpec,
    tokenizer: PromptTokenizer,
    n: int,
    warmup: bool,
    counter: ServerTokenCounter | None,
    notes: list[str],
) -> list[Request]:
    if spec.endpoint == "completions" or n == 0:
        return local_requests(spec, tokenizer, n, warmup)
    if tokenizer.can_render_chat:
        requests = local_requests(spec, tokenizer, n, warmup)
        if counter is None:
            return requests
        probe = requests[:CHAT_PROBE_REQUESTS]
        try:
            server_counts = await asyncio.gather(*(counter(r.chat_messages()) for r in probe))
        except Exception as e:
            notes.append(f"chat prompt lengths counted locally only (/tokenize failed: {e})")
            return requests
        if all(r.prompt_tokens == c for r, c in zip(probe, server_counts)):
            return requests
        notes.append("local chat template count differs from the server's: prompts aligned with /tokenize")
    elif counter is None:
        raise LoadRunError("chat prompts need the tokenizer's chat template or the server's /tokenize")
    plans = plan_requests(spec, tokenizer, n, warmup=warmup, start=_first(spec, warmup))
    return list(await asyncio.gather(*(realize_async(p, tokenizer, counter) for p in plans)))


class LazyTokenizer:
    """Loaded on first use: a study passing prebuilt requests never needs it."""

    def __init__(self, path, model, root):
        self.args = (path, model, root)
        self._tok: PromptTokenizer | None = None

    def get(self) -> PromptTokenizer:
        if self._tok is None:
            self._tok = _tokenizer_for(*self.args)
        return self._tok


def _new_record(req: Request, warmup: bool) -> RequestRecord:
    return RequestRecord(req.index, req.class_name, math.nan, req.prompt_tokens, req.output_tokens, warmup=warmup)


class RequestPool:
    """Prepared bodies and records; a duration-bounded closed loop extends it on demand."""

    def __init__(self, spec, tokenizer: LazyTokenizer, client, model, requests: list[Request], warmup: bool):
        self.spec, self.tokenizer, self.client, self.model, self.warmup = spec, tokenizer, client, model, warmup
        self.prepared: list[Any] = []
        self.records: list[RequestRecord] = []
        self.extended = 0
        self._add(requests)

    def _add(self, requests: list[Request]) -> None:
        for r in requests:
            self.prepared.append(self.client.prepare(r, self.model, self.spec.temperature))
            self.records.append(_new_record(r, self.warmup))

    def get(self, i: int) -> tuple[Any, RequestRecord]:
        while i >= len(self.records):  # local chat counts here: no awaiting in the middle of a run
            self._add(
                build_requests(
                    self.spec,
                    self.tokenizer.get(),
                    CLOSED_LOOP_BATCH,
                    warmup=self.warmup,
                    start=_first(self.spec, self.warmup) + len(self.records),
                )
            )
            self.extended += 1
        return self.prepared[i], self.records[i]
