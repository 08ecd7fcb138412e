"""Requests of simulated stages, as the load run records them (times in seconds from 0)."""

from __future__ import annotations

from loadgen import RequestRecord


def done(i: int, send: float, ttft: float, tokens: int = 8, itl: float = 0.05) -> RequestRecord:
    r = RequestRecord(i, "a", send, 10, tokens)
    r.send_time = send
    r.chunk_times = [send + ttft + k * itl for k in range(tokens)]
    r.first_token_time = r.chunk_times[0]
    r.end_time = r.chunk_times[-1]
    r.completion_tokens = tokens
    return r


def saturated_stage(rate: float, service_rate: float, n: int) -> list[RequestRecord]:
    """One server at `service_rate`, requests at `rate`: each TTFT waits for the backlog."""
    records, free_at = [], 0.0
    for i in range(n):
        send = i / rate
        start = max(send, free_at)
        free_at = start + 1.0 / service_rate
        records.append(done(i, send, free_at - send, tokens=2, itl=0.01))
    return records
