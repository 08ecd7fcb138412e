"""A hung server under load fails the trial as `hang` in bounded time (search.executor's watch
over objectives.load.stall), keeping what was measured; a stopped process group is killed at once."""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from objectives.load.loadrun import run_async, run_load
from objectives.load.stall import ProgressWatch
from objectives.load.workload import WorkloadSpec
from search.executor import measured_before
from search.serving import FailureClass
from search.serving.running import ServerFailed, while_serving
from search.serving.server import LaunchSpec, VllmServer, group_members, group_stopped
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

    def elapsed(self) -> float:
        return 0.0


def _workload(rate: float, duration_s: float) -> WorkloadSpec:
    return WorkloadSpec.model_validate({
        "endpoint": "completions", "prompt_tokens": 20, "output_tokens": 20,
        "arrival": {"mode": "constant", "rate": rate}, "duration_s": duration_s,
        "request_timeout_s": 60, "seed": 1})


def _watched_load(stub: StubServer, tok_dir, spec: WorkloadSpec, tmp_path: Path, watch: ProgressWatch):
    server = StubAsServer(stub, tmp_path / "server.log")
    return run_async(while_serving(server, run_load(stub.base_url, None, spec, tokenizer_path=tok_dir,
                                                    watch=watch), "load", watch), "asyncio")


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


def _stopped_group(tmp_path: Path, ignore_term: bool) -> VllmServer:
    """A server object over a sleeping process group, stopped with SIGSTOP (no vLLM needed)."""
    server = VllmServer(LaunchSpec(None, [], tmp_path / "server.log", stop_grace_s=15.0))
    handler = "signal.signal(signal.SIGTERM, signal.SIG_IGN); " if ignore_term else ""
    code = f"import signal, subprocess, sys, time; {handler}" \
           "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"
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
