"""What a session workload adds to a run's metrics: latencies and errors by turn index, and the
share of prompt tokens an ideal prefix cache would serve (the reuse that sessions imply).

The reuse share mirrors how vLLM's prefix cache counts hits: a prompt's tokens are hashed in
whole blocks, each block's key chained to the blocks before it, and a prompt hits as many of its
leading blocks as an earlier prompt left in the cache; the last token is always computed, so a
prompt never hits all of its tokens. Nothing is evicted here: a server whose cache is too small
for the sessions in flight measures less than this share, which is the point of comparing them.
Only prompt tokens count, as the server's `vllm:prefix_cache_queries` does; blocks of generated
tokens are left out (the answer comes back as text, and its tokens need not re-encode the same).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loadgen.request_record import RequestRecord


@dataclass(frozen=True)
class TurnStats:
    turn: int  # from 1
    sent: int
    failed: int
    ttft_p50_ms: float
    ttft_p95_ms: float
    tpot_p50_ms: float
    prompt_tokens_mean: float  # as the server counted them (usage)


def _quantile_ms(values: list[float], q: float) -> float:
    return float(np.quantile(values, q) * 1000) if values else float("nan")


def turn_stats(records: Sequence[RequestRecord]) -> list[TurnStats]:
    """Per turn index, over the measured turns sent (warm-up and aborted turns left out)."""
    by_turn: dict[int, list[RequestRecord]] = defaultdict(list)
    for r in records:
        if r.turn is not None and not r.warmup and not r.aborted and r.send_time == r.send_time:
            by_turn[r.turn].append(r)
    out = []
    for turn in sorted(by_turn):
        rs = by_turn[turn]
        ok = [r for r in rs if r.ok]
        prompts = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
        out.append(
            TurnStats(
                turn,
                len(rs),
                sum(r.failed for r in rs),
                _quantile_ms([r.ttft for r in ok], 0.5),
                _quantile_ms([r.ttft for r in ok], 0.95),
                _quantile_ms([r.tpot for r in ok if r.decode_timed], 0.5),
                float(np.mean(prompts)) if prompts else float("nan"),
            )
        )
    return out


@dataclass(frozen=True)
class SessionReport:
    """A session workload's run, beyond its per-request metrics."""

    sessions: int  # sessions started
    completed: int  # ... whose every turn was answered
    turns: list[TurnStats]
    reuse_share: float  # `cached_prefix_share` of the measured turns; NaN where unknown
    block_size: int | None  # the server's KV block, which the share is counted in

    def to_json(self) -> dict:
        return {
            "sessions": self.sessions,
            "completed": self.completed,
            "reuse_share": self.reuse_share,
            "block_size": self.block_size,
            "turns": [vars(t) for t in self.turns],
        }


def cached_prefix_share(prompts: Sequence[Sequence[int]], block_size: int, counted_from: int = 0) -> float:
    """Of the prompt tokens of prompts[counted_from:] (prompts in the order the server saw them),
    the share an ideal prefix cache of `block_size`-token blocks serves from earlier prompts; the
    prompts before `counted_from` (a warm-up) only fill the cache."""
    if block_size < 1:
        raise ValueError("block_size must be at least 1")
    seen: set[int] = set()
    hits = total = 0
    for i, ids in enumerate(prompts):
        counted = i >= counted_from
        total += len(ids) if counted else 0
        key = 0
        leading = True
        for b in range(len(ids) // block_size):
            key = hash((key, tuple(ids[b * block_size : (b + 1) * block_size])))
            if leading and key in seen:
                hits += block_size if counted else 0
            else:
                leading = False
            seen.add(key)
        if counted and leading and len(ids) % block_size == 0 and len(ids) >= block_size:
            hits -= block_size  # every block hit: the last token is computed, so its block is too
    return hits / total if total else float("nan")
