"""The unloaded TPOT reference comes from streams whose decode the client could time.

On a fast CPU (bf16) a short request's tokens reach the client in one read: its TPOT reads 0.0 ms
and, averaged into the reference, made a TPOT bound no configuration could meet. The stub pins
that: short streams go out in one write, long ones one token every 6 ms.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen import ProgressWatch, run_async, stall_bound_s
from loadgen.workload import WorkloadSpec
from search import calibration
from search.executor.calibration_run import WatchedServer, _unloaded
from search.scenario import Calibration, parse
from tests.support.stub_server import StubConfig, StubServer

SHORT, LONG = 8, 24
SCENARIO = """
name: t
title: t
workload: {endpoint: completions, num_requests: 10, prompt_tokens: 30, output_tokens: 8,
           arrival: {mode: poisson, rate: 1}}
objectives: [{metric: ttft_p95_ms, direction: minimize}]
slos: [{metric: tpot_p95_ms, max: {x_unloaded: 25}}, {metric: error_rate, max: 0.01}]
search_space: {max_num_seqs: {low: 4, high: 64}}
"""


def two_classes() -> WorkloadSpec:
    return WorkloadSpec.model_validate(
        {
            "endpoint": "completions",
            "arrival": {"mode": "closed", "concurrency": 1},
            "num_requests": 6,
            "classes": [
                {"name": "short", "weight": 0.7, "prompt_tokens": 30, "output_tokens": SHORT},
                {"name": "long", "weight": 0.3, "prompt_tokens": 60, "output_tokens": LONG},
            ],
        }
    )


def measure(stub: StubServer, tok_dir, wl: WorkloadSpec):
    watched = lambda load: run_async(load(ProgressWatch(stall_bound_s())))  # noqa: E731
    server = WatchedServer(stub.base_url, None, tok_dir, watched)
    return _unloaded(server, wl, Calibration(unloaded_requests=6), warmup=False, on_phase=lambda _: None, measured=[])


def test_streams_that_arrive_in_one_read_leave_the_tpot_reference(tok_dir, tok):
    with StubServer(
        StubConfig(root=str(tok_dir), ttft_ms=15, itl_ms=6, burst_below_tokens=SHORT + 1), tokenizer=tok
    ) as stub:
        unloaded, timed = measure(stub, tok_dir, two_classes())
    assert timed == {"short": 0.0, "long": 1.0}
    assert unloaded["tpot_median_ms@short"] is None
    assert unloaded["tpot_median_ms@long"] == pytest.approx(6.0, abs=3.0)
    # the overall reference is the long class's alone, not 0.7 x 0 + 0.3 x 6
    assert unloaded["tpot_median_ms"] == pytest.approx(unloaded["tpot_median_ms@long"])
    assert unloaded["ttft_median_ms@short"] > 0  # TTFT is still read from every stream


def test_no_timed_stream_stops_the_study_with_what_to_do(tok_dir, tok):
    with StubServer(StubConfig(root=str(tok_dir), ttft_ms=15, itl_ms=0), tokenizer=tok) as stub:
        unloaded, timed = measure(stub, tok_dir, two_classes())
    assert timed == {"short": 0.0, "long": 0.0} and unloaded["tpot_median_ms"] is None
    rounds = [{"capacity_rps": 2.0, "unloaded": unloaded, "decode_timed_share": timed}]
    cal = calibration.CalibrationResult.from_rounds(rounds, [{}], seconds=1.0)
    sc = parse(SCENARIO, "t.yaml", Path("."))
    (problem,) = calibration.problems(sc, cal)
    assert "could not time the decode" in problem and "absolute value" in problem


def test_sessions_are_calibrated_whole_and_without_think_times_each_turn_range_on_its_own(tok_dir, tok):
    import time

    wl = WorkloadSpec.model_validate(
        {
            "endpoint": "chat",
            "arrival": {"mode": "poisson", "rate": 1.0},
            "num_requests": 6,
            "sessions": {
                "turns": 3,
                "user_tokens": 10,
                "output_tokens": LONG,
                "system_prompt_tokens": 12,
                "think_time_s": 30.0,  # a lone user's latency does not depend on it: left out
            },
        }
    )
    with StubServer(StubConfig(root=str(tok_dir), ttft_ms=15, itl_ms=6), tokenizer=tok) as stub:
        t0 = time.monotonic()
        unloaded, timed = measure(stub, tok_dir, wl)
        elapsed = time.monotonic() - t0
        sent = stub.stub.stats.requests
    assert elapsed < 20  # with the think times: at least 2 x 30 s a session
    assert timed == {"first": 1.0, "later": 1.0}
    assert unloaded["ttft_median_ms@first"] > 0 and unloaded["ttft_median_ms@later"] > 0
    assert unloaded["tpot_median_ms@later"] == pytest.approx(6.0, abs=3.0)
    # whole sessions until the rarer range (first turns, 1 in 3) holds its 6 unloaded requests
    assert sent == 18
