"""The deterministic request builder: same workload and seed => the same requests, byte for byte.

Request i's class, lengths and shared prefix come from the workload's representative order
(`loadgen.class_order`: a quota order of the classes, stratified lengths within each), its
prompt's own tokens from a generator seeded with (seed, stream, i); all of it depends on (seed,
stream, i) alone, not on how many requests are built, the process or hash randomization.
Warm-up requests use another stream. A ShareGPT class's prompts are its file's exchanges
(`sharegpt`), taken in a seeded order.

Completions prompts are token ids: exact lengths, no template. Chat prompts are text decoded
from random token ids, trimmed or extended until the templated prompt has exactly the target
count; the counting function is local (the tokenizer's chat template) or the server's
`/tokenize` (see `align_chat_requests`). As `vllm bench serve` does.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loadgen import random_streams
from loadgen.class_order import ClassOrder, unit_points
from loadgen.request_class import RequestClass
from loadgen.sharegpt import ShareGPTSource
from loadgen.tokenizer import PromptTokenizer
from loadgen.trace import trace_drafts
from loadgen.workload import WorkloadSpec

MAX_ALIGN_STEPS = 6
_POOL_EXTRA = 128  # spare ids beyond the target, for chat prompts that re-encode shorter

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class Request:
    index: int
    class_name: str
    prompt_tokens: int  # as the server will count it (checked against usage.prompt_tokens)
    output_tokens: int  # exact: ignore_eos + max_tokens
    target_prompt_tokens: int  # what the workload asked for (differs only if it could not be met)
    prompt_ids: tuple[int, ...] | None = None  # completions
    messages: tuple[dict[str, str], ...] | None = None  # chat
    prefix_id: int | None = None

    def body(self, model: str, temperature: float | None) -> dict[str, Any]:
        """The JSON body, as `vllm bench serve` sends it (streaming, usage, exact output)."""
        if self.prompt_ids is not None:
            body: dict[str, Any] = {"model": model, "prompt": list(self.prompt_ids), "max_tokens": self.output_tokens}
        else:
            body = {"model": model, "messages": self.chat_messages(), "max_completion_tokens": self.output_tokens}
        body.update({"ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
        if temperature is not None:
            body["temperature"] = temperature
        return body

    def chat_messages(self) -> Messages:
        """A chat request's messages, each a dict of its own (the request keeps them frozen)."""
        if self.messages is None:
            raise ValueError(f"request {self.index} is a completions request: it has no messages")
        return [dict(m) for m in self.messages]

    def encoded_body(self, model: str, temperature: float | None) -> bytes:
        return json.dumps(self.body(model, temperature), separators=(",", ":"), ensure_ascii=False).encode()


@dataclass
class _Plan:
    """Everything a request draws from its generator, before chat alignment."""

    index: int
    class_name: str
    endpoint: str
    target_prompt: int | None  # None: natural length (ShareGPT)
    output_tokens: int
    prefix_id: int | None
    prefix_ids: np.ndarray | None
    pool: np.ndarray | None = None  # random ids: the body of a synthetic prompt
    text: str | None = None  # ShareGPT prompt
    text_ids: list[int] | None = field(default=None, repr=False)

    def synthetic(self) -> tuple[int, np.ndarray]:
        """A synthetic prompt's target length and the random ids it is built from."""
        if self.target_prompt is None or self.pool is None:
            raise ValueError(f"request {self.index}: a ShareGPT prompt is not built to a length")
        return self.target_prompt, self.pool


def _prefix_ids(
    spec: WorkloadSpec, cls_index: int, prefix_id: int, tokens: int, tokenizer: PromptTokenizer
) -> np.ndarray:
    rng = random_streams.seeded(spec.seed, random_streams.PREFIX, cls_index, prefix_id)
    ids = tokenizer.text_safe_ids if spec.endpoint == "chat" else tokenizer.allowed_ids
    return rng.choice(ids, size=tokens)


# -- planning (all random draws) --------------------------------------------------------------


def plan_requests(
    spec: WorkloadSpec, tokenizer: PromptTokenizer, n: int, *, warmup: bool = False, start: int = 0
) -> list[_Plan]:
    """Plans of requests start .. start+n-1 of the workload's measured (or warm-up) sequence:
    each one's class and lengths from the representative order (`loadgen.class_order`), its
    prompt's own tokens from its own generator."""
    stream = random_streams.WARMUP if warmup else random_streams.MEASURED
    trace = spec.replayed_trace()
    if trace is not None:  # each request a row of the trace: its lengths, its shared tokens
        vocabulary = tokenizer.text_safe_ids if spec.endpoint == "chat" else tokenizer.allowed_ids
        out = []
        for d in trace_drafts(trace, spec.seed, spec.endpoint, vocabulary, start, n, warmup=warmup):
            body = d.prompt_tokens - (len(d.shared_ids) if d.shared_ids is not None else 0)
            pool = random_streams.seeded(spec.seed, stream, d.index).choice(vocabulary, size=body + _POOL_EXTRA)
            out.append(
                _Plan(
                    d.index,
                    d.class_name,
                    spec.endpoint,
                    d.prompt_tokens,
                    d.output_tokens,
                    d.prefix_id,
                    d.shared_ids,
                    pool=pool,
                )
            )
        return out
    order = ClassOrder([c.weight for c in spec.classes], spec.seed, stream)
    sources: dict[int, ShareGPTSource] = {}
    prefix_cache: dict[tuple[int, int], np.ndarray] = {}
    plans = []
    for index in range(start, start + n):
        ci, rank = order.class_of(index), order.rank_of(index)
        cls: RequestClass = spec.classes[ci]
        u_prompt, u_output, u_prefix = unit_points(spec.seed, stream, ci, rank)[0]
        prefix_id = prefix = None
        if cls.shared_prefix is not None and u_prefix < cls.shared_prefix.fraction:
            # the point below the fraction, stretched over the prefixes: each as often as the others
            prefix_id = min(
                int(u_prefix / cls.shared_prefix.fraction * cls.shared_prefix.count), cls.shared_prefix.count - 1
            )
            key = (ci, prefix_id)
            if key not in prefix_cache:
                prefix_cache[key] = _prefix_ids(spec, ci, prefix_id, cls.shared_prefix.tokens, tokenizer)
            prefix = prefix_cache[key]
        output = int(cls.output_tokens.quantile(u_output)[0]) if cls.output_tokens is not None else None
        rng = random_streams.seeded(spec.seed, stream, index)  # the request's own tokens
        if cls.sharegpt is not None:
            if ci not in sources:
                sources[ci] = ShareGPTSource(
                    cls.sharegpt, spec.seed, stream, ci, tokenizer, need_output=cls.output_tokens is None
                )
            # the class's j-th request takes the j-th valid exchange of the seeded order
            text, text_ids, ref_out = sources[ci].get(rank)
            plans.append(
                _Plan(
                    index,
                    cls.name,
                    spec.endpoint,
                    None,
                    output if output is not None else ref_out,
                    prefix_id,
                    prefix,
                    text=text,
                    text_ids=text_ids,
                )
            )
            continue
        if cls.prompt_tokens is None or output is None:  # `RequestClass` asks for both without sharegpt
            raise ValueError(f"class {cls.name}: needs prompt_tokens and output_tokens (or a sharegpt file)")
        target = int(cls.prompt_tokens.quantile(u_prompt)[0])
        body_len = target - (len(prefix) if prefix is not None else 0)
        ids = tokenizer.text_safe_ids if spec.endpoint == "chat" else tokenizer.allowed_ids
        pool = rng.choice(ids, size=body_len + _POOL_EXTRA)
        plans.append(_Plan(index, cls.name, spec.endpoint, target, output, prefix_id, prefix, pool=pool))
    return plans


# -- realizing a plan (chat alignment) --------------------------------------------------------


def _chat_messages(plan: _Plan, tokenizer: PromptTokenizer, user_text: str) -> Messages:
    msgs: Messages = []
    if plan.prefix_ids is not None:
        msgs.append({"role": "system", "content": tokenizer.decode(plan.prefix_ids)})
    msgs.append({"role": "user", "content": user_text})
    return msgs


def _align_steps(plan: _Plan, tokenizer: PromptTokenizer) -> Generator[Messages, int, tuple[Messages, int]]:
    """Yields candidate messages, receives their token count; returns the best (messages, count).

    Written as a generator so one algorithm serves a local (sync) and a server (async) counter.
    The body length k is corrected by the count error; merges make counts jump, so if that
    does not land exactly, a body just below the target is topped up with a filler word that
    adds exactly one token per repetition.
    """
    if plan.text is not None:
        msgs = _chat_messages(plan, tokenizer, plan.text)
        n = yield msgs
        return msgs, n
    target, pool = plan.synthetic()
    prefix = len(plan.prefix_ids) if plan.prefix_ids is not None else 0
    counts: dict[int, int] = {}
    best: tuple[int, Messages, int] | None = None

    def consider(msgs: Messages, n: int) -> bool:
        nonlocal best
        if best is None or abs(target - n) < best[0]:
            best = (abs(target - n), msgs, n)
        return n == target

    k = max(1, min(len(pool), target - prefix))
    for _ in range(MAX_ALIGN_STEPS):
        msgs = _chat_messages(plan, tokenizer, tokenizer.decode(pool[:k]))
        n = counts[k] = yield msgs
        if consider(msgs, n):
            return msgs, n
        nxt = max(1, min(len(pool), k + target - n))
        if nxt in counts:
            break
        k = nxt
    filler = tokenizer.filler
    if filler is not None:
        below = [kk for kk, n in counts.items() if n < target]
        k = max(below) if below else min(counts)
        while counts[k] >= target and k > 1:  # step down until the body is short enough
            k = max(1, k - (counts[k] - target) - 1)
            msgs = _chat_messages(plan, tokenizer, tokenizer.decode(pool[:k]))
            counts[k] = yield msgs
            if consider(msgs, counts[k]):
                return msgs, counts[k]
        text = tokenizer.decode(pool[:k])
        fill = target - counts[k]
        for _ in range(4):
            if fill <= 0:
                break
            msgs = _chat_messages(plan, tokenizer, text + filler * fill)
            n = yield msgs
            if consider(msgs, n):
                return msgs, n
            fill += target - n
    if best is None:  # every path above counts a candidate first
        raise ValueError(f"request {plan.index}: no chat prompt was counted")
    return best[1], best[2]


def _completion_request(plan: _Plan) -> Request:
    """A completions request: its prompt the token ids themselves, exact."""
    head = [int(i) for i in plan.prefix_ids] if plan.prefix_ids is not None else []
    if plan.text_ids is not None:
        body = plan.text_ids
    else:
        target, pool = plan.synthetic()
        body = [int(i) for i in pool[: target - len(head)]]
    ids = tuple(head + list(body))
    return Request(
        plan.index,
        plan.class_name,
        len(ids),
        plan.output_tokens,
        plan.target_prompt or len(ids),
        prompt_ids=ids,
        prefix_id=plan.prefix_id,
    )


def _chat_request(plan: _Plan, msgs: Messages, count: int) -> Request:
    """A chat request: the messages its alignment chose, and their token count."""
    return Request(
        plan.index,
        plan.class_name,
        count,
        plan.output_tokens,
        plan.target_prompt or count,
        messages=tuple(msgs),
        prefix_id=plan.prefix_id,
    )


def realize(plan: _Plan, tokenizer: PromptTokenizer, count: Callable[[Messages], int] | None = None) -> Request:
    if plan.endpoint == "completions":
        return _completion_request(plan)
    count = count or tokenizer.count_chat
    steps = _align_steps(plan, tokenizer)
    msgs = next(steps)
    try:
        while True:
            msgs = steps.send(count(msgs))
    except StopIteration as done:
        return _chat_request(plan, *done.value)


async def realize_async(
    plan: _Plan, tokenizer: PromptTokenizer, count: Callable[[Messages], Awaitable[int]]
) -> Request:
    if plan.endpoint == "completions":
        return _completion_request(plan)
    steps = _align_steps(plan, tokenizer)
    msgs = next(steps)
    try:
        while True:
            msgs = steps.send(await count(msgs))
    except StopIteration as done:
        return _chat_request(plan, *done.value)


def build_requests(
    spec: WorkloadSpec,
    tokenizer: PromptTokenizer,
    n: int | None = None,
    *,
    warmup: bool = False,
    start: int = 0,
    count: Callable[[Messages], int] | None = None,
) -> list[Request]:
    """n requests (default: num_requests, or warmup_requests with warmup=True), counted locally."""
    if n is None:
        n = spec.warmup_requests if warmup else spec.num_requests
        if n is None:
            raise ValueError("duration-bounded workload: say how many requests to build (n)")
    if spec.endpoint == "chat" and count is None and not tokenizer.can_render_chat:
        raise ValueError(
            "chat prompts of exact length need the tokenizer's chat template or the "
            "server's /tokenize (build them with loadrun, which asks the server)"
        )
    return [realize(p, tokenizer, count) for p in plan_requests(spec, tokenizer, n, warmup=warmup, start=start)]


def requests_digest(requests: list[Request], model: str = "m", temperature: float | None = 0.0) -> str:
    import hashlib

    h = hashlib.sha256()
    for r in requests:
        h.update(r.class_name.encode())
        h.update(r.encoded_body(model, temperature))
    return h.hexdigest()
