"""A trace's requests as prompts: each row's lengths, its shared prefix made of real shared tokens.

Request i of a run is row i of the seeded window (`replay`); a warm-up request is one of
the rows just before the window. A row's shared part is its segment chain (`formats`): each
segment's tokens are drawn from a generator seeded with (workload seed, the segment's key), so
every request that names the segment sends the same tokens, and two requests send the same
leading tokens exactly as far as their chains agree: the server's prefix cache sees the
trace's sharing. The rest of the prompt (`loadgen.prompts`) is the request's own random tokens.

The shared part stops short of the whole prompt: one token on the completions endpoint, and on
the chat endpoint `CHAT_RESERVE_TOKENS` for the chat template and the user's message.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadgen import random_streams
from loadgen.trace.formats import Segments, Trace
from loadgen.trace.replay_plan import warmup_rows, window_rows, window_start

CHAT_RESERVE_TOKENS = 64


@dataclass(frozen=True)
class TraceDraft:
    """What a request takes from its row, before its own tokens are drawn."""

    index: int
    row: int
    class_name: str
    prompt_tokens: int
    output_tokens: int
    prefix_id: int | None  # the first segment's key, shortened: the prefix the request shares
    shared_ids: np.ndarray | None  # its segments' tokens, cut to leave room for its own


def segment_ids(seed: int, key: int, tokens: int, vocabulary: np.ndarray) -> np.ndarray:
    """A segment's tokens: the same for every request naming it (and a shorter use of a key is
    a prefix of a longer one, as two requests sharing a prefix id with different lengths are)."""
    rng = random_streams.seeded(seed, random_streams.TRACE_SEGMENT, key)
    return vocabulary[rng.integers(0, len(vocabulary), size=tokens)]


class SegmentTokens:
    """Segment tokens drawn once per build (a Mooncake window names each block many times)."""

    def __init__(self, seed: int, vocabulary: np.ndarray):
        self.seed, self.vocabulary = seed, vocabulary
        self._cache: dict[tuple[int, int], np.ndarray] = {}

    def chain(self, segments: Segments, limit: int) -> np.ndarray | None:
        parts, total = [], 0
        for key, tokens in segments:
            if total >= limit:
                break
            if (key, tokens) not in self._cache:
                self._cache[(key, tokens)] = segment_ids(self.seed, key, tokens, self.vocabulary)
            parts.append(self._cache[(key, tokens)])
            total += tokens
        if not parts:
            return None
        ids = np.concatenate(parts)[:limit]
        return ids if len(ids) else None


def trace_drafts(
    trace: Trace,
    seed: int,
    endpoint: str,
    vocabulary: np.ndarray,
    first: int,
    n: int,
    *,
    warmup: bool = False,
) -> list[TraceDraft]:
    """Drafts of requests first .. first+n-1 of a run (of its warm-up with `warmup`)."""
    rows_total = len(trace)
    start = window_start(rows_total, seed)
    if warmup:
        rows = warmup_rows(rows_total, start, first, n)
    else:
        rows = window_rows(rows_total, start, first, n)
    reserve = CHAT_RESERVE_TOKENS if endpoint == "chat" else 1
    segments = SegmentTokens(seed, vocabulary)
    out = []
    for i, row in enumerate(rows.tolist()):
        prompt = int(trace.prompt_tokens[row])
        shared = None
        prefix_id = None
        if trace.segments is not None and trace.segments[row]:
            shared = segments.chain(trace.segments[row], max(0, prompt - reserve))
            prefix_id = trace.segments[row][0][0] % 2**31 if shared is not None else None
        out.append(
            TraceDraft(
                first + i,
                row,
                trace.class_names[int(trace.class_index[row])],
                prompt,
                int(trace.output_tokens[row]),
                prefix_id,
                shared,
            )
        )
    return out
