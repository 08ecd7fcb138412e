"""Prompts from a ShareGPT file: its conversations' first exchanges (a human turn and its answer),
read once per file, and a class's source of them in a seeded order, tokenized on demand and
filtered by length as `vllm bench serve` filters them. A room of its own beside the request
builder (`prompts`), which takes a class's j-th exchange from here as it takes a synthetic
prompt's tokens from a generator.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from loadgen import random_streams
from loadgen.request_class import SHAREGPT_MAX_PROMPT_TOKENS, SHAREGPT_MAX_TOTAL_TOKENS, SHAREGPT_MIN_TOKENS
from loadgen.tokenizer import PromptTokenizer


def _first_exchange(entry: dict) -> tuple[str, str] | None:
    turns = entry.get("conversations") or entry.get("conversation") or entry.get("messages") or []
    if len(turns) < 2:
        return None

    def role(t: dict) -> str:
        return str(t.get("from") or t.get("role") or "").lower()

    def text(t: dict) -> str:
        return str(t.get("value") if "value" in t else t.get("content", ""))

    if role(turns[0]) not in ("human", "user") or role(turns[1]) not in ("gpt", "assistant", "chatgpt"):
        return None
    return text(turns[0]), text(turns[1])


@lru_cache(maxsize=8)
def _sharegpt_pairs(path: str) -> tuple[tuple[str, str], ...]:
    raw = Path(path).read_text()
    stripped = raw.lstrip()
    if stripped.startswith("["):
        entries = json.loads(raw)
    else:
        entries = [json.loads(line) for line in raw.splitlines() if line.strip()]
    pairs = tuple(p for p in (_first_exchange(e) for e in entries if isinstance(e, dict)) if p)
    if not pairs:
        raise ValueError(f"{path}: no conversation with a human turn followed by an answer")
    return pairs


class ShareGPTSource:
    """The file's valid exchanges in a seeded order, tokenized on demand, cycling when used up."""

    def __init__(
        self, path: Path, seed: int, stream: int, cls_index: int, tokenizer: PromptTokenizer, need_output: bool
    ):
        self.pairs = _sharegpt_pairs(str(path))
        self.order = random_streams.seeded(seed, random_streams.SHAREGPT, stream, cls_index).permutation(
            len(self.pairs)
        )
        self.tokenizer = tokenizer
        self.need_output = need_output
        self.valid: list[tuple[str, list[int], int]] = []
        self._next = 0
        self.path = path

    def get(self, k: int) -> tuple[str, list[int], int]:
        while len(self.valid) <= k and self._next < len(self.order):
            prompt, answer = self.pairs[self.order[self._next]]
            self._next += 1
            ids = self.tokenizer.encode(prompt)
            out = len(self.tokenizer.encode(answer)) if self.need_output else SHAREGPT_MIN_TOKENS
            if (
                SHAREGPT_MIN_TOKENS <= len(ids) <= SHAREGPT_MAX_PROMPT_TOKENS
                and out >= SHAREGPT_MIN_TOKENS
                and (not self.need_output or len(ids) + out <= SHAREGPT_MAX_TOTAL_TOKENS)
            ):
                self.valid.append((prompt, ids, out))
        if not self.valid:
            raise ValueError(
                f"{self.path}: no exchange passes the ShareGPT length filters "
                f"(prompt and answer >= {SHAREGPT_MIN_TOKENS} tokens, prompt <= "
                f"{SHAREGPT_MAX_PROMPT_TOKENS}, both <= {SHAREGPT_MAX_TOTAL_TOKENS})"
            )
        if len(self.valid) <= k:  # the file is used up: cycle
            return self.valid[k % len(self.valid)]
        return self.valid[k]
