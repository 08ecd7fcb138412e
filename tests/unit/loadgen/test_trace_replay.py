"""Replaying a trace: the seeded window, time scaling that keeps the gaps' shape, clipping,
statistics, and prompts whose shared prefixes share their tokens."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.trace_synthetic import synthetic_trace
from loadgen.trace.formats import Trace, TraceError
from loadgen.trace.replay_plan import (
    clip_lengths,
    clipped,
    gaps_before,
    replay_offsets,
    scale_to_rate,
    window_rows,
    window_start,
)
from loadgen.trace.stats import (
    interarrival_cv,
    mean_rate,
    shared_tokens_from_ids,
    shared_tokens_from_segments,
    traffic_stats,
)
from loadgen.trace.trace_prompts import trace_drafts

VOCAB = np.arange(1000, 5000, dtype=np.int64)


def trace(times, prompts=None, outputs=None, segments=None) -> Trace:
    n = len(times)
    return Trace(
        "t.jsonl",
        "jsonl",
        np.asarray(times, dtype=float),
        np.asarray(prompts or [100] * n, dtype=np.int64),
        np.asarray(outputs or [10] * n, dtype=np.int64),
        ("default",),
        np.zeros(n, dtype=np.int64),
        segments,
    )


def synthetic() -> Trace:
    s = synthetic_trace(2400, seed=3)
    return trace(s.arrival_s - s.arrival_s[0], s.prompt_tokens.tolist(), s.output_tokens.tolist())


# -- window and time scaling ---------------------------------------------------------------------


def test_scaling_keeps_the_shape_of_the_gaps_and_reaches_the_rate():
    gaps = np.array([0.1, 0.1, 5.0, 0.2, 0.1, 3.0])
    offsets = scale_to_rate(gaps, rate=2.0)
    assert offsets[-1] == pytest.approx(len(gaps) / 2.0)  # the window's mean rate is the run's
    np.testing.assert_allclose(np.diff(np.concatenate([[0], offsets])) / gaps, (6 / 2.0) / gaps.sum())


def test_replay_keeps_the_trace_windows_burstiness_at_any_rate():
    t = synthetic()
    start = window_start(len(t), 7)
    rows = window_rows(len(t), start, 0, 300)
    source = np.cumsum(gaps_before(t.arrival_s, rows))
    for rate in (0.5, 4.0):
        offsets = replay_offsets(t, 7, 300, rate)
        assert interarrival_cv(offsets) == pytest.approx(interarrival_cv(source), rel=1e-9)
        assert offsets[-1] == pytest.approx(300 / rate)
    assert interarrival_cv(source) > 1.2  # the synthetic day is bursty: not a flattened Poisson


def test_the_window_is_drawn_from_the_seed():
    t = synthetic()
    assert window_start(len(t), 1) == window_start(len(t), 1)
    starts = {window_start(len(t), seed) for seed in range(20)}
    assert len(starts) > 15
    a, b = replay_offsets(t, 1, 50, 1.0), replay_offsets(t, 2, 50, 1.0)
    assert np.array_equal(a, replay_offsets(t, 1, 50, 1.0)) and not np.allclose(a, b)


def test_a_longer_run_replays_the_shorter_ones_rows_first_and_wraps_around():
    assert window_rows(10, 8, 0, 5).tolist() == [8, 9, 0, 1, 2]
    assert window_rows(10, 8, 3, 2).tolist() == [1, 2]  # request 3 is the same row at any length


def test_the_gap_where_the_loop_closes_is_the_mean_gap():
    t = np.array([0.0, 1.0, 2.0, 9.0])
    assert gaps_before(t, np.array([3, 0, 1])).tolist() == [7.0, 3.0, 1.0]


def test_a_window_at_one_instant_has_no_pattern_to_scale():
    with pytest.raises(TraceError, match="all arrived at one instant"):
        scale_to_rate(np.zeros(4), 1.0)


def test_an_empty_run_is_an_empty_window():
    with pytest.raises(TraceError, match="an empty window"):
        replay_offsets(trace([0, 1, 2]), 0, 0, 1.0)


# -- clipping ------------------------------------------------------------------------------------


def test_clipping_fits_the_context_and_counts_the_requests_changed():
    p, o = clip_lengths(np.array([100, 8000, 100, 8000, 3000]), np.array([50, 200, 5000, 5000, 1000]), 4096)
    assert p.tolist() == [100, 3896, 100, 2048, 3000]
    assert o.tolist() == [50, 200, 3996, 2048, 1000]
    assert (p + o <= 4096).all()
    t = trace([0, 1, 2], [100, 8000, 300], [10, 10, 4000])
    fitted, changed = clipped(t, 4096)
    assert changed == 2 and (fitted.prompt_tokens + fitted.output_tokens <= 4096).all()
    assert clipped(t, None) == (t, 0)


# -- statistics ----------------------------------------------------------------------------------


def test_rate_and_cv_of_a_clockwork_and_a_bursty_stream():
    assert mean_rate(np.arange(11) * 0.5) == pytest.approx(2.0)
    assert interarrival_cv(np.arange(11) * 0.5) == pytest.approx(0.0)
    assert interarrival_cv(np.array([0, 0.01, 0.02, 5, 5.01, 10])) > 1


def test_prefix_sharing_counts_what_an_earlier_request_sent():
    a, b, c = (1, 64), (2, 64), (3, 64)
    segs = [(a, b), (a, c), (a, b), ()]
    shared = shared_tokens_from_segments(segs, np.array([200, 200, 100, 50]))
    assert shared.tolist() == [0, 64, 99, 0]
    assert shared_tokens_from_segments(segs, np.array([200, 200, 100, 50]), block=16).tolist() == [0, 64, 96, 0]
    # an earlier request that sent only part of a segment shares only that part
    assert shared_tokens_from_segments([(a,), (a,)], np.array([20, 200])).tolist() == [0, 19]


def test_shared_tokens_from_ids_agree_with_the_segments():
    ids = [list(range(64)) + [900] * 10, list(range(64)) + [901] * 30, [5] * 40]
    assert shared_tokens_from_ids(ids, block=16).tolist() == [0, 64, 0]


def test_traffic_stats_report_the_table_rows():
    s = traffic_stats(np.arange(5.0), np.array([1, 2, 3, 4, 5]), np.array([5, 5, 5, 5, 5]), np.array([0, 1, 0, 0, 0]))
    rows = dict(s.rows())
    assert rows["mean rate (req/s)"] == 1.0 and rows["prompt tokens p50"] == 3.0
    assert rows["requests sharing a prefix"] == pytest.approx(0.2)
    assert rows["prompt tokens shared"] == pytest.approx(1 / 15)


# -- prompts -------------------------------------------------------------------------------------


def test_requests_that_share_a_prefix_send_the_same_tokens():
    a, b = (11, 512), (12, 512)
    t = trace([0, 1, 2, 3], [700, 300, 900, 600], segments=((a, b), (a,), (a, (13, 512)), ()))
    drafts = {d.row: d for d in trace_drafts(t, 5, "completions", VOCAB, 0, 4)}
    assert np.array_equal(drafts[0].shared_ids[:512], drafts[2].shared_ids[:512])
    assert not np.array_equal(drafts[0].shared_ids[512:600], drafts[2].shared_ids[512:600])
    assert np.array_equal(drafts[1].shared_ids, drafts[0].shared_ids[:299])  # cut to leave one token
    assert drafts[3].shared_ids is None and drafts[3].prefix_id is None
    assert drafts[0].prefix_id == drafts[1].prefix_id == drafts[2].prefix_id
    assert [drafts[row].prompt_tokens for row in range(4)] == [700, 300, 900, 600]


def test_a_requests_draft_does_not_depend_on_the_runs_length():
    t = synthetic()
    long = trace_drafts(t, 9, "completions", VOCAB, 0, 40)
    part = trace_drafts(t, 9, "completions", VOCAB, 30, 10)
    assert [(d.index, d.row) for d in long[30:]] == [(d.index, d.row) for d in part]
    warm = trace_drafts(t, 9, "completions", VOCAB, 0, 4, warmup=True)
    assert not {d.row for d in warm} & {d.row for d in long}


def test_a_prefix_is_the_same_tokens_in_every_build():
    a = (21, 256)
    t = trace([0, 1, 2, 3], [300, 300, 300, 300], segments=((a,), (), (a,), ()))
    first = trace_drafts(t, 5, "completions", VOCAB, 0, 4)
    later = trace_drafts(t, 5, "completions", VOCAB, 0, 4, warmup=True)  # another build, other rows
    shared = [d.shared_ids for d in first + later if d.shared_ids is not None]
    assert len(shared) >= 3 and all(np.array_equal(x, shared[0]) for x in shared)
    # a prefix id named with fewer tokens is the start of the same prefix (ids of differing lengths in a log)
    shorter = trace_drafts(trace([0, 1], [300, 300], segments=(((21, 100),), ())), 5, "completions", VOCAB, 0, 2)
    assert np.array_equal(next(d.shared_ids for d in shorter if d.shared_ids is not None), shared[0][:100])
