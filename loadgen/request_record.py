"""A request as the client records it (`RequestRecord`), its failure kinds, and the columns a
stage's records are stored in.

A record holds what the client saw of one request (times are `time.perf_counter()` seconds: when
it was due, sent, each token-bearing chunk, its end; usage; its error kind), and its own
latencies as vLLM defines them (`ttft`, `tpot`, `e2el`; the run's metrics over them are
`metrics`'); `request_samples` is a stage's records in the columns stored with it, and
`records_from_samples` the records rebuilt from them. It is its own module because every part
of the load generator writes or reads records, while only `metrics` computes from them."""

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
    session: int | None = None  # a session's turn: the session's index in the workload
    turn: int | None = None  # ... and the turn's, from 1
    answer: list[str] | None = None  # the answer's text pieces, kept where a later turn resends it

    @property
    def ok(self) -> bool:
        return self.error_kind is None and bool(self.chunk_times)

    @property
    def tpot(self) -> float:
        """Seconds per output token after the first, as vLLM's TPOT (0 for a one-token answer)."""
        n = self.output_tokens
        return (self.e2el - self.ttft) / (n - 1) if n > 1 else 0.0

    @property
    def decode_timed(self) -> bool:
        """Its tokens reached the client in more than one read, so `e2el - ttft` spans decode
        steps. A stream whose tokens all came in one read (a fast decode whose deltas vLLM or the
        socket coalesced) has TPOT 0 whatever the server did: it times nothing."""
        return self.ok and self.output_tokens > 1 and self.chunk_times[-1] > self.chunk_times[0]

    @property
    def aborted(self) -> bool:
        return self.error_kind == ABORTED

    @property
    def failed(self) -> bool:
        """Sent and ended without a complete answer (an error, a timeout, no token), not cut
        short by the load generator. Its latencies are unknown: it counts in the error rate and
        as above every latency bound, never as a latency value (`compute_metrics`)."""
        return self.end_time == self.end_time and not self.ok and not self.aborted

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
            "index": self.index,
            "class": self.class_name,
            "warmup": self.warmup,
            "scheduled": rel(self.scheduled_time),
            "sent": rel(self.send_time),
            "first_token": rel(self.first_token_time),
            "end": rel(self.end_time),
            "chunks": [round(t - t0, 6) for t in self.chunk_times],
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "expected_prompt_tokens": self.expected_prompt_tokens,
            "expected_output_tokens": self.expected_output_tokens,
            "status": self.status,
            "error_kind": self.error_kind,
            "error_text": self.error_text,
            **({"session": self.session, "turn": self.turn} if self.session is not None else {}),
        }


SAMPLE_KEYS = ("class", "sent_s", "ttft_s", "e2e_s", "output_tokens", "ok", "aborted")
SAMPLE_DIGITS = 4  # 0.1 ms: finer than the client's own timing noise


def request_samples(records: list[RequestRecord], t0: float) -> dict[str, list]:
    """The measured requests of a stage, columnar and JSON-ready (stored with every stage row).

    Warm-up and never-sent requests are left out. `sent_s` is seconds from `t0` (the stage's
    start); `ttft_s`/`e2e_s` are None for a request without a token; `aborted`: cut short by an
    early abort, so censored: it had waited at least (stage end - sent_s) for what it lacks.
    TPOT is (e2e_s - ttft_s) / (output_tokens - 1), as `vllm bench serve`."""
    out: dict[str, list] = {k: [] for k in SAMPLE_KEYS}
    for r in records:
        if r.warmup or r.send_time != r.send_time:
            continue
        out["class"].append(r.class_name)
        out["sent_s"].append(round(r.send_time - t0, SAMPLE_DIGITS))
        out["ttft_s"].append(round(r.ttft, SAMPLE_DIGITS) if r.chunk_times else None)
        out["e2e_s"].append(round(r.e2el, SAMPLE_DIGITS) if r.chunk_times else None)
        out["output_tokens"].append(r.output_tokens)
        out["ok"].append(r.ok)
        out["aborted"].append(r.aborted)
    return out


def records_from_samples(samples: dict[str, list], end_s: float) -> list[RequestRecord]:
    """Records rebuilt from stored samples (times from the stage's start, 0), as a replay of
    the stage's rules needs them: the first and last token of each request, its token count as
    usage said, failures ending where they were sent (the samples keep no end), requests cut
    short by an abort ending at `end_s`, the stage's end."""
    records = []
    for i, (cls, sent, ttft, e2e, tokens, ok, aborted) in enumerate(zip(*(samples[k] for k in SAMPLE_KEYS))):
        r = RequestRecord(i, cls, sent, 0, tokens)
        r.send_time = sent
        if ttft is not None:
            r.chunk_times = [sent + ttft] + ([sent + e2e] if tokens > 1 and e2e is not None else [])
            r.first_token_time = r.chunk_times[0]
            r.completion_tokens = tokens
        if aborted:
            r.fail(ABORTED, "cut short by an early abort", end_s)
        elif not ok:
            r.fail(CLIENT_ERROR, "failed (replayed from samples)", r.chunk_times[-1] if r.chunk_times else sent)
        else:
            r.end_time = r.chunk_times[-1]
        records.append(r)
    return records
