"""A recorded stage asked again: its requests as a load run saw them at each moment.

Offline only: a stopping check (`objectives.early_abort.abort_check`) is asked again over a
finished stage's records, as the load run asked it while the stage ran (the tests and
`benchmarks/bench_stopping.py` measure the rules this way); the load run never calls it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from loadgen import Abort, AbortCheck, GaugeSample, RequestRecord

__all__ = ["replay", "seen_at", "waiting_proxy"]


def seen_at(records: Sequence[RequestRecord], now: float) -> list[RequestRecord]:
    """The records as the load run saw them at `now`: not yet sent, in flight with the chunks
    received so far, or finished (times are the records' own, compared with `now`)."""
    out = []
    for r in records:
        v = RequestRecord(
            r.index, r.class_name, r.scheduled_time, r.expected_prompt_tokens, r.expected_output_tokens, warmup=r.warmup
        )
        if r.send_time <= now:
            v.send_time = r.send_time
            v.chunk_times = [t for t in r.chunk_times if t <= now]
            v.first_token_time = v.chunk_times[0] if v.chunk_times else None
            if r.end_time <= now:
                v.end_time, v.status = r.end_time, r.status
                v.completion_tokens, v.prompt_tokens = r.completion_tokens, r.prompt_tokens
                v.error_kind, v.error_text = r.error_kind, r.error_text
        out.append(v)
    return out


def waiting_proxy(records: Sequence[RequestRecord], end: float, period_s: float = 1.0) -> list[GaugeSample]:
    """A stand-in for the server's waiting queue where its gauges were not kept: once every
    `period_s`, the requests sent and still without their first token (queued, or in prefill)."""
    out = []
    t = period_s
    while t <= end:
        waiting = sum(
            1
            for r in records
            if r.send_time <= t and not (r.chunk_times and r.chunk_times[0] <= t) and not r.end_time <= t
        )
        out.append(GaugeSample(t, math.nan, float(waiting), math.nan))
        t += period_s
    return out


def replay(
    check: AbortCheck,
    records: Sequence[RequestRecord],
    end: float,
    gauges: Sequence[GaugeSample] = (),
    period_s: float = 0.5,
) -> tuple[float, Abort] | None:
    """(when, why) `check` would have stopped a stage with these (final) records, asked every
    `period_s` as the load run asks it, or None if it ran to `end`. `records`: every planned
    request, times from the stage's start; a request is known as far as it had come by then."""
    now = period_s
    while now < end:
        verdict = check(seen_at(records, now), now, [g for g in gauges if g.t <= now])
        if verdict is not None:
            return now, verdict
        now += period_s
    return None
