"""A workload's `trace:` section: which file, which part of it, and the lengths the model can take.

    workload:
      trace: {file: gateway-week.jsonl, start_s: 32400, end_s: 61200, max_total_tokens: 4096}
      arrival: {mode: trace, capacity_fraction: 0.4}

The file (relative to the scenario's directory) is read when the workload is validated, so a
file that is not a trace, an empty window or a bad row is one line before any server starts.
`start_s`/`end_s` pick a part of the trace by its own clock (seconds since its first request:
09:00-17:00 of the first day above); `max_total_tokens` clips each request to fit the model's
context (`replay.clip_lengths`), and the requests clipped are counted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from loadgen.trace.formats import MOONCAKE_BLOCK_TOKENS, Trace, read_trace
from loadgen.trace.replay_plan import clipped
from loadgen.trace.stats import shared_tokens_from_segments

TraceFormat = Literal["auto", "jsonl", "azure", "burstgpt", "mooncake"]


class TraceSpec(BaseModel):
    """Requests from a trace file (docs/traces.md): arrivals, lengths and shared prefixes."""

    model_config = ConfigDict(extra="forbid")

    file: Path = Field(..., description="the trace: JSONL (ours or Mooncake's) or CSV (Azure's or BurstGPT's)")
    format: TraceFormat = Field("auto", description="auto: told by the file's columns")
    start_s: float | None = Field(None, ge=0, description="replay from this second of the trace's clock")
    end_s: float | None = Field(None, gt=0, description="... up to (not including) this one")
    max_total_tokens: int | None = Field(None, ge=2, description="clip prompt + output to this (the model's context)")
    block_tokens: int = Field(MOONCAKE_BLOCK_TOKENS, ge=1, description="tokens per hash_ids entry")

    _trace: Trace | None = PrivateAttr(default=None)
    _clipped: int = PrivateAttr(default=0)

    @field_validator("file", mode="before")
    @classmethod
    def _relative_to_the_scenario(cls, v: Any, info: ValidationInfo) -> Any:
        if v is None:
            return v
        path = Path(v).expanduser()
        base = (info.context or {}).get("base_dir") if info.context else None
        return Path(base) / path if not path.is_absolute() and base is not None else path

    @model_validator(mode="after")
    def _read(self) -> TraceSpec:
        if self.start_s is not None and self.end_s is not None and self.end_s <= self.start_s:
            raise ValueError(f"end_s ({self.end_s:g}) must be after start_s ({self.start_s:g})")
        trace = read_trace(self.file, self.format, self.block_tokens)  # TraceError is a ValueError
        if self.start_s is not None or self.end_s is not None:
            trace = trace.between(self.start_s, self.end_s)
        self._trace, self._clipped = clipped(trace, self.max_total_tokens)
        return self

    @property
    def trace(self) -> Trace:
        """The part replayed, its lengths clipped."""
        assert self._trace is not None
        return self._trace

    @property
    def clipped_requests(self) -> int:
        return self._clipped

    def longest_request_tokens(self) -> int:
        return int((self.trace.prompt_tokens + self.trace.output_tokens).max())

    def beyond_context(self, context: int) -> str | None:
        """One line if requests of the trace do not fit `context` tokens (prompt + output)."""
        total = self.trace.prompt_tokens + self.trace.output_tokens
        over = int(np.count_nonzero(total > context))
        if not over:
            return None
        return (
            f"workload.trace: {over} of {len(total)} requests of {self.file.name} are longer than the model's "
            f"context ({context} tokens, prompt + output; the longest {int(total.max())}): set "
            f"workload.trace.max_total_tokens: {context} to clip them"
        )

    def prefix_summary(self, class_name: str | None = None) -> tuple[float, int, int] | None:
        """(share of requests that carry a prefix, its median tokens, distinct prefixes), or None
        if the trace says nothing of prefixes: what the diagnosis reads of a class's sharing."""
        trace = self.trace if class_name is None else self.trace.of_classes([class_name])
        if trace.segments is None:
            return None
        shared = shared_tokens_from_segments(trace.segments, trace.prompt_tokens)
        if not shared.any():
            return None
        firsts = {segs[0][0] for segs in trace.segments if segs}
        return float(np.mean(shared > 0)), int(np.median(shared[shared > 0])), len(firsts)
