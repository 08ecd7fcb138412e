"""The stall watchdog's rule (loadgen.stall) on hand-made records, and its bound."""

from __future__ import annotations

import math

from loadgen.request_record import ABORTED, HTTP_ERROR, TIMEOUT, RequestRecord
from loadgen.stall import STALL_FLOOR_S, STALL_TTFT_FACTOR, Ask, ProgressWatch, stall_bound_s, stalled


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


# -- what an early abort or a request timeout cut off, and the tuner's own requests ------------


def test_requests_cut_off_unanswered_stay_owed_until_the_server_progresses():
    # An early abort cut off two requests the hung server never answered, at 3.0: nothing is in
    # flight any more, but the silence goes on from the last token (1.5), not from the abort.
    records = [rec(0.0, [1.0, 1.5], end=1.5), rec(1.0, end=3.0, error=ABORTED), rec(1.2, end=3.0, error=TIMEOUT)]
    assert stalled(records, now=1.5 + 4.9, bound_s=5.0) is None
    stall = stalled(records, now=1.5 + 5.0, bound_s=5.0)
    assert stall is not None and (stall.in_flight, stall.cut_off) == (0, 2)
    assert stall.describe() == (
        "no token and no finished request for 5 s with 0 requests in flight and 2 cut off unanswered (bound 5 s)"
    )
    # a token after the cut answers them: nothing is owed
    assert stalled([*records, rec(3.5, [3.6], end=3.7)], now=100.0, bound_s=5.0) is None


def test_the_tuners_own_request_unanswered_past_the_bound_is_a_stall():
    models = Ask("GET /v1/models", sent=10.0)
    done = [rec(0.0, [0.1], end=0.2)]
    assert stalled(done, now=14.9, bound_s=5.0, asks=[models]) is None
    stall = stalled(done, now=15.0, bound_s=5.0, asks=[models])
    assert stall is not None and stall.describe() == "no answer to GET /v1/models for 5 s (bound 5 s)"
    models.answered = 11.0
    assert stalled(done, now=100.0, bound_s=5.0, asks=[models]) is None


def test_a_request_of_the_tuners_that_timed_out_stays_owed_until_any_answer():
    metrics = Ask("GET /metrics", sent=10.0, given_up=15.0)  # wait_idle's 5 s, then it moved on
    reset = Ask("POST /reset_prefix_cache", sent=15.1)
    stall = stalled([], now=20.0, bound_s=5.0, asks=[metrics, reset])
    assert (
        stall is not None
        and stall.describe() == "no answer to GET /metrics, POST /reset_prefix_cache for 10 s (bound 5 s)"
    )
    reset.answered = 15.2
    assert stalled([], now=100.0, bound_s=5.0, asks=[metrics, reset]) is None


def test_an_engine_hung_behind_a_live_api_server_is_a_stall_though_metrics_answers():
    # /metrics answers (the API server is alive) but says nothing about tokens: the requests
    # the abort cut off stay owed.
    records = [rec(0.0, [0.5], end=0.5), rec(0.2, end=1.0, error=ABORTED)]
    asks = [Ask("GET /metrics", sent=t, answered=t + 0.01) for t in (1.0, 1.25, 1.5, 5.0)]
    stall = stalled(records, now=5.5, bound_s=5.0, asks=asks)
    assert stall is not None and stall.cut_off == 1 and not stall.unanswered


def _after_an_aborted_stage(drained_at: float | None) -> ProgressWatch:
    """The target stage cut off one unanswered request at 2.0; the drain may have seen the
    server's gauges move; the next stage's model lookup, sent at 2.5, gets no answer."""
    watch = ProgressWatch(bound_s=5.0)
    watch.track([rec(0.0, [0.5], end=0.5), rec(0.4, end=2.0, error=ABORTED)])
    if drained_at is not None:
        watch.progress(drained_at)
    watch.ask("GET /v1/models", now=2.5)
    watch.track([])  # the next stage's records: nothing sent yet
    return watch


def test_the_watch_keeps_what_an_earlier_stage_cut_off_owed_across_the_stages():
    watch = _after_an_aborted_stage(drained_at=None)
    stall = watch.check(5.5)
    assert stall is not None and stall.cut_off == 1 and math.isclose(stall.quiet_s, 5.0)
    assert watch.current == []


def test_a_server_whose_gauges_moved_let_go_of_what_was_cut_off():
    watch = _after_an_aborted_stage(drained_at=2.2)
    assert watch.check(5.5) is None  # only the model lookup is owed, since its own send
    assert watch.check(7.5).describe() == "no answer to GET /v1/models for 5 s (bound 5 s)"


def test_a_stall_with_tokens_owed_is_told_by_them_though_an_ask_waited_longer():
    # nothing in flight at the stop (10.0); the sampler's /metrics at 10.2, the next request at 10.4
    records = [rec(9.5, [9.8, 10.0], end=10.0), rec(10.4)]
    stall = stalled(records, now=25.2, bound_s=15.0, asks=[Ask("GET /metrics", sent=10.2)])
    assert stall is not None and math.isclose(stall.quiet_s, 15.0)
    assert stall.describe() == "no token and no finished request for 15 s with 1 request in flight (bound 15 s)"


def test_evidence_that_it_cannot_answer_makes_any_silence_a_stall_but_only_while_something_is_owed():
    watch = ProgressWatch(bound_s=15.0)
    records = [rec(0.0, [0.1], end=0.2), rec(10.0)]  # one answered, one in flight for 2 s
    watch.track(records)
    assert watch.check(12.0) is None and watch.owes(12.0)
    stall = watch.check(12.0, evidence="/health did not answer within 3 s")
    assert stall is not None and stall.in_flight == 1 and math.isclose(stall.quiet_s, 2.0)
    assert stall.describe() == (
        "no token and no finished request for 2 s with 1 request in flight (bound 15 s); "
        "/health did not answer within 3 s"
    )
    records[1].chunk_times, records[1].end_time = [12.5], 12.6  # answered after all
    assert not watch.owes(13.0) and watch.check(13.0, evidence="/health did not answer within 3 s") is None
