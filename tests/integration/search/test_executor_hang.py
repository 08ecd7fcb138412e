"""A hung server under load fails the trial as `hang` in bounded time (search.executor's watch
over loadgen.stall), keeping what was measured; a stopped process group is killed at once."""

from __future__ import annotations

import asyncio
import http.client
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from loadgen import LoadOptions
from loadgen.event_loop import run_async
from loadgen.loadrun import run_load
from loadgen.stall import ProgressWatch
from loadgen.workload import WorkloadSpec
from objectives.scoring import SLOSpec
from objectives.stages import CapacitySpec
from search.executor import StagedLoad, StageSearch, measured_before, run_stages
from serving import FailureClass
from serving.process import ServerFailed, while_serving
from serving.process.process_group import group_members, group_stopped
from serving.process.server import LaunchSpec, VllmServer
from tests.support.stub_server import StubConfig, StubServer

BOUND_S = 1.5


class StubAsServer:
    """What the executor's watch asks of a server, answered by the stub (alive, never exits)."""

    def __init__(self, stub: StubServer, log_path: Path):
        self.stub, self.spec = stub, LaunchSpec(None, [], log_path)

    def poll_failure(self, phase: str):
        return None

    def healthy(self, timeout: float = 2.0) -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", self.stub.port, timeout=timeout)
        try:
            conn.request("GET", "/health")
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()

    def processes_stopped(self) -> bool:
        return False

    def elapsed(self) -> float:
        return 0.0


def _workload(rate: float, duration_s: float) -> WorkloadSpec:
    return WorkloadSpec.model_validate(
        {
            "endpoint": "completions",
            "prompt_tokens": 20,
            "output_tokens": 20,
            "arrival": {"mode": "constant", "rate": rate},
            "duration_s": duration_s,
            "request_timeout_s": 60,
            "seed": 1,
        }
    )


def _watched_load(stub: StubServer, tok_dir, spec: WorkloadSpec, tmp_path: Path, watch: ProgressWatch):
    server = StubAsServer(stub, tmp_path / "server.log")
    return run_async(
        while_serving(
            server,
            run_load(stub.base_url, None, spec, options=LoadOptions(tokenizer_path=tok_dir, watch=watch)),
            "load",
            watch,
        ),
        "asyncio",
    )


def test_a_server_that_freezes_mid_load_fails_as_hang_within_the_bound(tok_dir, tok, tmp_path):
    spec = _workload(rate=8, duration_s=30)
    watch = ProgressWatch(BOUND_S)
    with StubServer(StubConfig(ttft_ms=30, itl_ms=20, root=str(tok_dir), freeze_after_s=2.0), tok) as s:
        with pytest.raises(ServerFailed) as caught:
            _watched_load(s, tok_dir, spec, tmp_path, watch)
        failed_at = time.perf_counter()
        frozen_at = s.stub.frozen_at
    failure = caught.value.failure
    assert failure.cls is FailureClass.HANG and failure.phase == "load"
    assert failure.line.startswith("no token and no finished request for ")
    assert f"requests in flight (bound {BOUND_S:.0f} s); /health did not answer" in failure.line
    # the bound, a poll (0.5 s), the /health probe (2 s) and the cancel, with room for a busy machine
    assert BOUND_S <= failed_at - frozen_at < BOUND_S + 0.5 + 2.0 + 3.0
    before = measured_before(watch.current, spec)  # what was finished before the freeze is kept
    assert before["completed"] >= 5 and before["ttft_median_ms"] < 1000


def test_a_slow_but_live_server_at_a_low_rate_is_not_a_hang(tok_dir, tok, tmp_path):
    # Idle gaps of 2.5 s between requests, each answered within 1 s: longer silences than the
    # bound, but never with a request waiting that long.
    spec = _workload(rate=0.4, duration_s=6)
    with StubServer(StubConfig(ttft_ms=900, itl_ms=5, root=str(tok_dir)), tok) as s:
        result = _watched_load(s, tok_dir, spec, tmp_path, ProgressWatch(1.0))
    assert result.metrics.completed == len(result.records) >= 2 and result.metrics.failed == 0


# -- the staged path (search.executor.staged_load): a freeze in any stage, or between them ---------

STAGED_BOUND_S = 3.0
# A live stub streams 20 tokens in 0.4 s, TTFT 30 ms: the target stage (2 warm-ups, 10 req/s for
# 2 s) and each capacity stage (2 s) meet TTFT p90 <= 300 ms; frozen, the early abort is certain
# once 3 requests are 300 ms old without a token, about a second in: before the bound. Should a
# busy machine fail the target stage, the search still steps down to a second stage (5 req/s).
STAGED_SLOS = [SLOSpec(metric="ttft_p90_ms", max=300.0)]


def _freeze_in_stage(stub: StubServer, stage: int, after_s: float, stages: list[str]):
    """An `on_stage` callback that notes each stage as it begins and freezes the stub `after_s`
    into stage `stage` (1: the target)."""
    app = stub.stub

    def freeze() -> None:
        app.first_request = app.first_request or time.perf_counter()
        app.config.freeze_after_s = time.perf_counter() - app.first_request

    def on_stage(message: str) -> None:
        if ": " in message:  # a stage's verdict, said as it ends
            return
        stages.append(message)
        if message.startswith(f"stage {stage}/"):
            threading.Timer(after_s, freeze).start()

    return on_stage


def _watched_stages(
    stub: StubServer,
    tok_dir,
    tmp_path: Path,
    on_stage=lambda _: None,
    requests: int = 20,
    max_stages: int = 2,
    limit_s: float = 40.0,
    bound_s: float = STAGED_BOUND_S,
    screen: bool = False,
):
    """run_stages on the stub, under while_serving; a run that outlives `limit_s` (a hang
    nobody noticed) fails the test in bounded time."""
    workload = WorkloadSpec.model_validate(
        {
            "endpoint": "completions",
            "prompt_tokens": 20,
            "output_tokens": 20,
            "warmup_requests": 2,
            "arrival": {"mode": "constant", "rate": 10},
            "num_requests": requests,
            "request_timeout_s": 60,
            "seed": 1,
        }
    )
    capacity = CapacitySpec(max_stages=max_stages, idle_timeout_s=30)
    watch = ProgressWatch(bound_s)
    server = StubAsServer(stub, tmp_path / "server.log")
    measure = run_stages(
        stub.base_url,
        None,
        StagedLoad(workload, STAGED_SLOS, capacity, search=StageSearch(screen=screen)),
        tokenizer_path=tok_dir,
        on_stage=on_stage,
        watch=watch,
    )
    return run_async(asyncio.wait_for(while_serving(server, measure, "load", watch), limit_s), "asyncio")


def _fails_as_hang_in_bounded_time(stub: StubServer, tok_dir, tmp_path: Path, on_stage) -> str:
    with pytest.raises(ServerFailed) as caught:
        _watched_stages(stub, tok_dir, tmp_path, on_stage)
    failed_at = time.perf_counter()
    failure = caught.value.failure
    assert failure.cls is FailureClass.HANG and failure.phase == "load", failure.line
    # the process watch's probe or the load's own liveness check (whichever reads the stall
    # first) says /health went unanswered; both name the bound
    assert re.search(rf"\(bound {STAGED_BOUND_S:.0f} s\); /health did not answer( within \d+ s)?$", failure.line)
    # the bound, a poll (0.5 s), the /health probe (2 s), the cancel, room for a busy machine
    assert STAGED_BOUND_S <= failed_at - stub.stub.frozen_at < STAGED_BOUND_S + 0.5 + 2.0 + 3.0
    return failure.line


def _live_stub(tok_dir, tok, **kw) -> StubServer:
    return StubServer(StubConfig(**{"ttft_ms": 30, "itl_ms": 20, **kw}, root=str(tok_dir)), tok)


def test_a_freeze_in_the_warm_up_of_a_staged_run_fails_as_hang(tok_dir, tok, tmp_path):
    with _live_stub(tok_dir, tok, freeze_after_s=0.1) as s:
        line = _fails_as_hang_in_bounded_time(s, tok_dir, tmp_path, lambda _: None)
    assert line.startswith("no token and no finished request for ") and "2 requests in flight" in line


def test_a_freeze_the_target_stages_early_abort_cut_short_still_fails_as_hang(tok_dir, tok, tmp_path):
    """The abort cuts off the hung server's requests before the bound, the watch sees nothing in
    flight, and the next stage's model lookup must not wait out its 120 s timeout."""
    stages: list[str] = []
    with _live_stub(tok_dir, tok) as s:
        line = _fails_as_hang_in_bounded_time(s, tok_dir, tmp_path, _freeze_in_stage(s, 1, 1.0, stages))
    assert "cut off unanswered" in line  # the abort came first
    assert len(stages) == 1  # noticed before a capacity stage began


def test_a_freeze_the_abort_of_a_screened_target_stage_reads_as_a_miss_is_a_hang(tok_dir, tok, tmp_path):
    """The search's screening: a target stage that missed runs no capacity stage, so the abort
    that cut a frozen server's requests off ends the trial's measurement well before the stall
    bound (here the floor, 15 s, as on a real server). Before that stage's verdict is scored the
    server must show it is alive; frozen, its /health is silent and the trial is a hang."""
    stages: list[str] = []
    bound_s = 15.0
    with _live_stub(tok_dir, tok) as s:
        with pytest.raises(ServerFailed) as caught:
            _watched_stages(s, tok_dir, tmp_path, _freeze_in_stage(s, 1, 1.0, stages), bound_s=bound_s, screen=True)
        failed_s = time.perf_counter() - s.stub.frozen_at
    failure = caught.value.failure
    assert failure.cls is FailureClass.HANG and failure.phase == "load", failure.line
    assert "cut off unanswered" in failure.line  # the abort came first ...
    assert failure.line.endswith(f"(bound {bound_s:.0f} s); /health did not answer within 3 s"), failure.line
    assert failed_s < bound_s  # ... and the stage's end did not wait for the bound
    assert len(stages) == 1


def test_an_engine_that_hangs_behind_a_live_api_server_reading_idle_fails_as_hang(tok_dir, tok, tmp_path):
    """/health answers and the gauges read idle (the engine's last figures): neither is progress.
    The target stage misses at once (nothing answered) and its early abort cuts it short; the
    verdict waits for the engine to show it is live (a one-token request), which it never does."""
    stages: list[str] = []
    with _live_stub(tok_dir, tok, freeze_engine_only=True) as s:
        with pytest.raises(ServerFailed) as caught:
            _watched_stages(s, tok_dir, tmp_path, _freeze_in_stage(s, 1, 0.5, stages), screen=True)
        failed_at = time.perf_counter()
        frozen_at = s.stub.frozen_at
    failure = caught.value.failure
    assert failure.cls is FailureClass.HANG and failure.phase == "load", failure.line
    assert failure.line.startswith("no token and no finished request for "), failure.line
    assert "/health did not answer" not in failure.line  # it did: the silence decided, at the bound
    assert STAGED_BOUND_S <= failed_at - frozen_at < STAGED_BOUND_S + 0.5 + 2.0 + 3.0
    assert len(stages) == 1


def test_a_freeze_in_a_capacity_stage_fails_as_hang(tok_dir, tok, tmp_path):
    stages: list[str] = []
    with _live_stub(tok_dir, tok) as s:
        line = _fails_as_hang_in_bounded_time(s, tok_dir, tmp_path, _freeze_in_stage(s, 2, 0.6, stages))
    assert line.startswith("no token and no finished request for ") and len(stages) == 2, stages


def test_a_freeze_as_a_capacity_stage_begins_fails_as_hang_on_its_first_request(tok_dir, tok, tmp_path):
    """Frozen before the stage sent anything: the tuner's own GET /v1/models goes unanswered."""
    stages: list[str] = []
    with _live_stub(tok_dir, tok) as s:
        line = _fails_as_hang_in_bounded_time(s, tok_dir, tmp_path, _freeze_in_stage(s, 2, 0.0, stages))
    assert line.startswith("no answer to GET /v1/models for ")


def test_a_live_server_that_drains_an_aborted_stage_longer_than_the_bound_is_not_a_hang(tok_dir, tok, tmp_path):
    """One slot and TTFT 1.2 s: the target stage misses the SLO and is cut short with requests
    queued, which the stub works off one at a time for longer than the bound, no token reaching
    the client; its gauges move meanwhile, and that is progress (read first before the stage's
    verdict, `loadgen.liveness`, then by the drain)."""
    with _live_stub(tok_dir, tok, ttft_ms=1200, itl_ms=0, slots=1) as s:
        run = _watched_stages(s, tok_dir, tmp_path, requests=40, max_stages=1)
    assert [x.aborted is not None for x in run.stages] == [True, True]
    assert run.stages[1].idle_wait_s > STAGED_BOUND_S


def _stopped_group(tmp_path: Path, ignore_term: bool) -> VllmServer:
    """A server object over a sleeping process group, stopped with SIGSTOP (no vLLM needed)."""
    server = VllmServer(LaunchSpec(None, [], tmp_path / "server.log", stop_grace_s=15.0))
    handler = "signal.signal(signal.SIGTERM, signal.SIG_IGN); " if ignore_term else ""
    code = (
        f"import signal, subprocess, sys, time; {handler}"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"
    )
    server.proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    server.port = 1  # nothing listens there
    deadline = time.monotonic() + 10
    while len(group_members(server.pgid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(group_members(server.pgid)) == 2
    os.killpg(server.pgid, signal.SIGSTOP)
    while not group_stopped(group_members(server.pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)  # the signal is delivered asynchronously
    return server


def test_stopping_a_stopped_group_kills_it_at_once_and_leaves_nothing(tmp_path):
    server = _stopped_group(tmp_path, ignore_term=False)
    pgid = server.pgid
    report = server.stop()
    assert report.killed and report.seconds < 3.0  # not the 15 s grace a pending TERM would wait
    assert group_members(pgid) == []


def test_a_hung_server_is_killed_without_waiting_for_its_grace(tmp_path):
    server = _stopped_group(tmp_path, ignore_term=True)
    os.killpg(server.pgid, signal.SIGCONT)  # running, but deaf to TERM, as a wedged server
    pgid = server.pgid
    report = server.stop(kill=True)
    assert report.killed and report.seconds < 3.0
    assert group_members(pgid) == []
