"""A workload's request classes, and what each of its requests is: its class and its lengths.

A request class (`RequestClass`): its weight, prompt and output lengths (`length_dist.LengthDist`)
or the ShareGPT file its prompts come from, and the shared prefix some of its requests carry; the
longest request it can send, which the study checks against max_model_len. The order its
requests come in is `class_order`'s.

Lengths count tokens as the server counts them: `prompt_tokens` is the whole prompt (shared
prefix and, on the chat endpoint, the chat template included), `output_tokens` is exact
(`ignore_eos` + `max_tokens`). A relative `sharegpt` path resolves as a length file's does
(`length_dist.resolve_yaml_path`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from loadgen.length_dist import LengthDist, resolve_yaml_path

# ShareGPT filters, as `vllm bench serve` applies them (prompt and reference answer lengths).
SHAREGPT_MIN_TOKENS = 4
SHAREGPT_MAX_PROMPT_TOKENS = 1024
SHAREGPT_MAX_TOTAL_TOKENS = 2048
# A ShareGPT chat prompt is its text plus the chat template, whose size we only know with the
# tokenizer; this bounds it for `longest_request_tokens`.
CHAT_TEMPLATE_MARGIN_TOKENS = 64


class SharedPrefix(BaseModel):
    """The same system prompt / few-shot block on a fraction of requests (prefix caching)."""

    model_config = ConfigDict(extra="forbid")

    fraction: float = Field(..., gt=0, le=1, description="share of requests that carry a prefix")
    tokens: int = Field(..., ge=1, description="prefix length")
    count: int = Field(1, ge=1, description="distinct prefixes, picked uniformly")


class RequestClass(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field("default", pattern=r"^[A-Za-z0-9_.-]+$")
    weight: float = Field(1.0, gt=0)
    prompt_tokens: LengthDist | None = None
    output_tokens: LengthDist | None = None
    shared_prefix: SharedPrefix | None = None
    sharegpt: Path | None = Field(
        None,
        description="ShareGPT JSON/JSONL file: prompts (and, "
        "without output_tokens, output lengths) from its first two turns",
    )

    @field_validator("sharegpt", mode="before")
    @classmethod
    def _sharegpt_path(cls, v: Any, info: ValidationInfo) -> Any:
        return resolve_yaml_path(v, info)

    @model_validator(mode="after")
    def _check(self) -> RequestClass:
        if self.sharegpt is not None:
            if self.prompt_tokens is not None:
                raise ValueError(
                    f"class {self.name}: with sharegpt the prompts come from the file; remove prompt_tokens"
                )
            if not self.sharegpt.is_file():
                raise ValueError(f"class {self.name}: sharegpt file not found: {self.sharegpt}")
        else:
            missing = [f for f in ("prompt_tokens", "output_tokens") if getattr(self, f) is None]
            if missing:
                raise ValueError(
                    f"class {self.name}: needs {' and '.join(missing)} (or a sharegpt file as the prompt source)"
                )
        if self.shared_prefix is not None and self.prompt_tokens is not None:
            lo = self.prompt_tokens.lower_bound()
            if lo <= self.shared_prefix.tokens:
                raise ValueError(
                    f"class {self.name}: prompt_tokens counts the whole prompt, so its smallest "
                    f"value ({lo}) must exceed shared_prefix.tokens ({self.shared_prefix.tokens}); "
                    "raise prompt_tokens.min"
                )
        return self

    def longest_prompt_tokens(self, endpoint: str) -> int:
        if self.prompt_tokens is not None:
            return self.prompt_tokens.upper_bound()
        prefix = self.shared_prefix.tokens if self.shared_prefix else 0
        margin = CHAT_TEMPLATE_MARGIN_TOKENS if endpoint == "chat" else 0
        return SHAREGPT_MAX_PROMPT_TOKENS + prefix + margin

    def longest_request_tokens(self, endpoint: str) -> int:
        if self.output_tokens is None:  # ShareGPT reference answers, filtered like vLLM
            prefix = self.shared_prefix.tokens if self.shared_prefix else 0
            margin = CHAT_TEMPLATE_MARGIN_TOKENS if endpoint == "chat" else 0
            return SHAREGPT_MAX_TOTAL_TOKENS + prefix + margin
        return self.longest_prompt_tokens(endpoint) + self.output_tokens.upper_bound()
