"""What the client writes down about one request. Times are `time.perf_counter()` seconds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Error kinds (`RequestRecord.error_kind`).
HTTP_ERROR = "http"  # non-200 status; the status is in `status`
TIMEOUT = "timeout"  # request_timeout_s elapsed
CONNECTION = "connection"  # could not connect, or the server hung up before answering
TRUNCATED = "truncated"  # the stream ended (or broke) before `data: [DONE]`
STREAM_ERROR = "stream_error"  # the server sent an error event inside the stream
NO_TOKEN = "no_token"  # a complete stream without a single token-bearing chunk
CLIENT_ERROR = "client_error"  # anything else raised while sending or reading
# Cut short by the load generator itself (an early-aborted stage): not a failure of the server,
# and not a measurement either, so metrics leave these requests out.
ABORTED = "aborted"


@dataclass(slots=True)
class RequestRecord:
    index: int
    class_name: str
    scheduled_time: float  # when the arrival process wanted it sent
    expected_prompt_tokens: int
    expected_output_tokens: int
    warmup: bool = False
    send_time: float = float("nan")  # taken immediately before the POST
    first_token_time: float | None = None  # first token-bearing chunk
    chunk_times: list[float] = field(default_factory=list)  # every token-bearing chunk
    end_time: float = float("nan")  # stream finished (or failed)
    prompt_tokens: int | None = None  # usage, the ground truth
    completion_tokens: int | None = None
    status: int | None = None  # HTTP status
    error_kind: str | None = None
    error_text: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_kind is None and bool(self.chunk_times)

    @property
    def aborted(self) -> bool:
        return self.error_kind == ABORTED

    @property
    def schedule_lag(self) -> float:
        return self.send_time - self.scheduled_time

    @property
    def ttft(self) -> float:
        return self.chunk_times[0] - self.send_time

    @property
    def e2el(self) -> float:
        """Send to the last token-bearing chunk (the usage chunk and [DONE] excluded), as vLLM."""
        return self.chunk_times[-1] - self.send_time

    @property
    def output_tokens(self) -> int:
        """usage.completion_tokens; the number of token-bearing chunks if the server sent none."""
        if self.completion_tokens:
            return self.completion_tokens
        return len(self.chunk_times)

    @property
    def input_tokens(self) -> int:
        return self.prompt_tokens if self.prompt_tokens is not None else self.expected_prompt_tokens

    def fail(self, kind: str, text: str, now: float) -> None:
        self.error_kind = kind
        self.error_text = text[:500]
        self.end_time = now

    def to_dict(self, t0: float = 0.0) -> dict[str, Any]:
        """JSON-friendly, times in seconds relative to t0 (the run's start)."""
        def rel(t: float | None) -> float | None:
            return None if t is None or t != t else round(t - t0, 6)

        return {
            "index": self.index, "class": self.class_name, "warmup": self.warmup,
            "scheduled": rel(self.scheduled_time), "sent": rel(self.send_time),
            "first_token": rel(self.first_token_time), "end": rel(self.end_time),
            "chunks": [round(t - t0, 6) for t in self.chunk_times],
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "expected_prompt_tokens": self.expected_prompt_tokens,
            "expected_output_tokens": self.expected_output_tokens,
            "status": self.status, "error_kind": self.error_kind, "error_text": self.error_text,
        }
