"""The stall watchdog's rule (objectives.load.stall) on hand-made records, and its bound."""

from __future__ import annotations

import math

from objectives.load.records import ABORTED, HTTP_ERROR, TIMEOUT, RequestRecord
from objectives.load.stall import STALL_FLOOR_S, STALL_TTFT_FACTOR, ProgressWatch, stall_bound_s, stalled


def rec(sent: float, chunks=(), end: float = math.nan, error: str | None = None) -> RequestRecord:
    r = RequestRecord(0, "c", sent, 10, 8, send_time=sent, chunk_times=list(chunks), end_time=end)
    r.error_kind = error
    return r


def test_silence_with_requests_in_flight_past_the_bound_is_a_stall():
    records = [rec(0.0, [0.1, 0.2], end=0.3), rec(1.0, [1.1, 1.2]), rec(1.5)]
    assert stalled(records, now=1.2 + 4.9, bound_s=5.0) is None
    stall = stalled(records, now=1.2 + 5.0, bound_s=5.0)
    assert stall is not None and stall.in_flight == 2 and math.isclose(stall.quiet_s, 5.0)
    assert stall.describe() == "no token and no finished request for 5 s with 2 requests in flight (bound 5 s)"


def test_nothing_in_flight_is_never_a_stall():
    assert stalled([rec(0.0, [0.1], end=0.2), rec(math.nan)], now=1000.0, bound_s=5.0) is None
    assert stalled([], now=1000.0, bound_s=5.0) is None


def test_a_request_sent_after_a_long_idle_gap_gets_the_whole_bound_from_its_send():
    records = [rec(0.0, [0.1], end=0.2), rec(60.0)]  # a low rate: nothing happened for a minute
    assert stalled(records, now=64.0, bound_s=5.0) is None
    assert stalled(records, now=65.0, bound_s=5.0) is not None


def test_a_request_the_server_ended_is_progress_but_a_client_timeout_or_abort_is_not():
    in_flight = rec(0.0)
    assert stalled([in_flight, rec(0.0, end=9.0, error=HTTP_ERROR)], now=10.0, bound_s=5.0) is None
    for kind in (TIMEOUT, ABORTED):
        assert stalled([in_flight, rec(0.0, end=9.0, error=kind)], now=10.0, bound_s=5.0) is not None


def test_the_watch_reads_the_list_it_was_last_handed_as_it_grows():
    watch = ProgressWatch(bound_s=5.0)
    assert watch.check(100.0) is None
    warm = [rec(0.0, [0.1], end=0.2)]
    watch.track(warm)
    measured: list[RequestRecord] = []
    watch.track(measured)
    measured.append(rec(10.0))
    assert watch.current is measured and watch.check(15.0).in_flight == 1


def test_the_bound_is_a_few_unloaded_ttfts_with_a_floor():
    assert stall_bound_s(None) == STALL_FLOOR_S
    assert stall_bound_s(float("nan")) == STALL_FLOOR_S
    assert stall_bound_s(100.0) == STALL_FLOOR_S  # a fast model: the floor
    assert stall_bound_s(10_000.0) == STALL_TTFT_FACTOR * 10.0  # 10 s alone: 5 x that
