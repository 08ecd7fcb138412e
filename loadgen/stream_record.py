"""What a streamed answer writes into its `RequestRecord`, the same for every client (`client`,
`openai_client`): which chat delta keys bear a token, the usage counts, and how a stream that
ended without an error event is closed. A room of its own so that both clients read a stream
by one rule.

Chunk classification follows `vllm bench serve` (0.33): a token-bearing chunk has a non-empty
`choices`; on chat, the role-only opener (`delta: {role, content: ""}`) is not a token.
"""

from __future__ import annotations

from loadgen.request_record import NO_TOKEN, TRUNCATED, RequestRecord

TOKEN_DELTA_KEYS = ("content", "reasoning_content", "reasoning", "tool_calls", "function_call")


def apply_usage(usage: dict | None, rec: RequestRecord) -> None:
    if not usage:
        return
    if usage.get("completion_tokens") is not None:
        rec.completion_tokens = int(usage["completion_tokens"])
    if usage.get("prompt_tokens") is not None:
        rec.prompt_tokens = int(usage["prompt_tokens"])


def close_stream(rec, times: list[float], end: float, truncated: str | None) -> None:
    """A stream that ended without an error event: cut short (``truncated`` says how), without a
    single token, or complete."""
    if truncated is not None:
        rec.fail(TRUNCATED, truncated, end)
    elif not times:
        rec.fail(NO_TOKEN, "complete stream without a token-bearing chunk", end)
    else:
        rec.end_time = end
        rec.first_token_time = times[0]
