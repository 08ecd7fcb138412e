"""Multi-turn sessions: a workload of conversations instead of independent requests.

A session is a script fixed by (seed, stream, session index): how many turns it has, each turn's
new user message and output length, and the user's think time after each answer. Each turn's
prompt is the whole conversation so far (the shared system prompt, every earlier user message
and the answer the server actually returned) for the server's chat template, so the prefix reuse
across turns is the server's own. A turn is sent only after the previous answer came back and
the user thought (`session_dispatch`): a closed loop within a session. Sessions arrive as the
workload's arrivals say, at a rate of sessions per second.

A turn's request class is named for its turn range (`turn_classes`; by default `first` is turn 1
and `later` every turn after it), so every per-class metric, SLO and objective reads a turn range:
`ttft_p95_ms@later` is the TTFT p95 of turns 2 and later.

Session lengths are stratified as request lengths are (`class_order.unit_points`): any run of
consecutive sessions spans the turn-count distribution, its long tail included.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from loadgen import random_streams
from loadgen.class_order import unit_points
from loadgen.length_dist import LengthDist
from loadgen.request_class import CHAT_TEMPLATE_MARGIN_TOKENS, RequestClass
from loadgen.tokenizer import PromptTokenizer

Messages = list[dict[str, str]]

# The chat template's own tokens around one message (role header, end of turn): a bound for
# `longest_request_tokens`, which the study checks against max_model_len.
MESSAGE_TEMPLATE_TOKENS = 8
_GRID = (np.arange(4096) + 0.5) / 4096  # quantile points for a distribution's expectations


class ThinkTime(BaseModel):
    """The user's pause between an answer and the next turn. A bare number: that many seconds,
    every time."""

    model_config = ConfigDict(extra="forbid")

    mean_s: float = Field(..., ge=0, description="mean pause, s")
    dist: Literal["constant", "exponential"] = Field("exponential", description="constant or exponential")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            return {"mean_s": data, "dist": "constant"}
        return data

    def at(self, u: float) -> float:
        """The pause at quantile u of the distribution."""
        if self.dist == "constant" or self.mean_s == 0:
            return self.mean_s
        return float(-self.mean_s * np.log1p(-u))


class SessionSpec(BaseModel):
    """Conversations: turns per session, each turn's new tokens, the pause between turns."""

    model_config = ConfigDict(extra="forbid")

    turns: LengthDist = Field(..., description="turns per session (at least 1)")
    user_tokens: LengthDist = Field(..., description="each turn's new user message, tokens")
    output_tokens: LengthDist = Field(..., description="each turn's answer, tokens (exact: ignore_eos)")
    system_prompt_tokens: int = Field(0, ge=0, description="one system prompt every session starts with")
    think_time_s: ThinkTime = Field(
        default_factory=lambda: ThinkTime(mean_s=0.0), description="pause after each answer"
    )
    turn_classes: dict[str, int] = Field(
        default_factory=lambda: {"first": 1, "later": 2},
        description="request class name -> the first turn it covers (the first class starts at turn 1)",
    )

    @field_validator("turn_classes")
    @classmethod
    def _ranges(cls, v: dict[str, int]) -> dict[str, int]:
        starts = list(v.values())
        if not starts or starts[0] != 1:
            raise ValueError("the first turn class must start at turn 1")
        if any(b <= a for a, b in itertools.pairwise(starts)):
            raise ValueError(f"turn classes must start at increasing turns, got {starts}")
        for name in v:
            RequestClass.model_validate(
                {"name": name, "prompt_tokens": 2, "output_tokens": 1}
            )  # the name rule's one home
        return v

    def class_of_turn(self, turn: int) -> str:
        """The request class of turn `turn` (1-based)."""
        name = next(iter(self.turn_classes))
        for candidate, start in self.turn_classes.items():
            if turn >= start:
                name = candidate
        return name

    @cached_property
    def _turn_counts(self) -> np.ndarray:
        return self.turns.quantile(_GRID).astype(np.int64)

    def mean_turns(self) -> float:
        return float(self._turn_counts.mean())

    def class_weights(self) -> dict[str, float]:
        """Each turn class's share of all turns (what a class's weight is for the rest of the
        load generator), 0 where no session reaches it."""
        counts = self._turn_counts
        ranges = [*self.turn_classes.values(), int(counts.max()) + 1]
        total = counts.sum()
        return {
            name: float(np.clip(counts - start + 1, 0, ranges[i + 1] - start).sum() / total)
            for i, (name, start) in enumerate(self.turn_classes.items())
        }

    def longest_request_tokens(self) -> int:
        """The largest prompt + output a turn can have: the longest session's last turn."""
        turns = self.turns.upper_bound()
        per_turn = self.user_tokens.upper_bound() + self.output_tokens.upper_bound() + 2 * MESSAGE_TEMPLATE_TOKENS
        return self.system_prompt_tokens + turns * per_turn + CHAT_TEMPLATE_MARGIN_TOKENS

    def request_classes(self) -> list[RequestClass]:
        """The turn classes as request classes (weights as their shares of all turns; a class no
        session reaches keeps a tiny weight, so it stays a known name)."""
        weights = self.class_weights()
        prompt = LengthDist(dist="fixed", value=max(2, self.system_prompt_tokens + self.user_tokens.upper_bound()))
        return [
            RequestClass.model_construct(
                name=name,
                weight=max(weight, 1e-6),
                prompt_tokens=prompt,
                output_tokens=self.output_tokens,
                shared_prefix=None,
                sharegpt=None,
            )
            for name, weight in weights.items()
        ]


@dataclass(frozen=True)
class Turn:
    user_text: str
    output_tokens: int
    think_s: float  # the pause after this turn's answer, before the next turn


@dataclass(frozen=True)
class SessionScript:
    index: int
    system: str | None
    turns: tuple[Turn, ...]


class ScriptBook:
    """The scripts of one workload's sessions, built on demand: session i depends on (seed,
    stream, i) alone, so a stage's slice holds the same sessions in every trial."""

    def __init__(self, spec: SessionSpec, seed: int, stream: int, tokenizer: PromptTokenizer):
        self.spec, self.seed, self.stream, self.tokenizer = spec, seed, stream, tokenizer

    @cached_property
    def system(self) -> str | None:
        if not self.spec.system_prompt_tokens:
            return None
        ids = random_streams.seeded(self.seed, random_streams.SYSTEM_PROMPT).choice(
            self.tokenizer.text_safe_ids, size=self.spec.system_prompt_tokens
        )
        return self.tokenizer.decode(ids)

    def script(self, index: int) -> SessionScript:
        spec = self.spec
        u_turns, u_user, u_output = unit_points(self.seed, self.stream, 0, index)[0]
        n = int(spec.turns.quantile(u_turns)[0])
        rng = random_streams.seeded(self.seed, random_streams.SESSION, self.stream, index)
        # the first turn takes the session's stratified points, later ones their own draws
        users = [int(spec.user_tokens.quantile(u_user)[0])] + [int(x) for x in spec.user_tokens.sample(rng, n - 1)]
        outputs = [int(spec.output_tokens.quantile(u_output)[0])] + [
            int(x) for x in spec.output_tokens.sample(rng, n - 1)
        ]
        vocabulary = self.tokenizer.text_safe_ids
        turns = tuple(
            Turn(
                self.tokenizer.decode(rng.choice(vocabulary, size=users[t])),
                outputs[t],
                spec.think_time_s.at(float(rng.random())) if t + 1 < n else 0.0,
            )
            for t in range(n)
        )
        return SessionScript(index, self.system, turns)


def turn_messages(script: SessionScript, answers: Sequence[str], turn: int) -> Messages:
    """The prompt of turn `turn` (0-based): the system prompt, every earlier user message with
    the answer the server returned to it (`answers[j]` for turn j), then this turn's message."""
    if len(answers) < turn:
        raise ValueError(f"turn {turn + 1} needs the answers of the {turn} turns before it, got {len(answers)}")
    messages: Messages = [{"role": "system", "content": script.system}] if script.system else []
    for j in range(turn):
        messages.append({"role": "user", "content": script.turns[j].user_text})
        messages.append({"role": "assistant", "content": answers[j]})
    messages.append({"role": "user", "content": script.turns[turn].user_text})
    return messages
