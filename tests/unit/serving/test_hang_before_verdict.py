"""A server that stops answering while a stage's early abort would already fire is a hang, not an
SLO violation: before a load run's result is scored, the server shows it is alive
(`loadgen.liveness`), and the one watcher of a measurement (`serving.while_serving`) names the
hang. Driven by scripted records, a fake HTTP session and a fake server: no socket, no process.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from pathlib import Path

import pytest

from loadgen import ProgressWatch, RequestRecord, ServerHung, liveness_before_verdict
from loadgen.request_record import ABORTED
from objectives.early_abort import CERTAIN, abort_check
from objectives.scoring import SLOSpec
from serving import FailureClass, FailurePhase
from serving.process import ServerFailed, while_serving
from serving.process.serving_watch import PROCESSES_STOPPED

BOUND_S = 15.0
URL = "http://server"
SLOS = [SLOSpec(metric="ttft_p95_ms", max=500.0)]


def gauges(running: int, waiting: int = 0, kv: float = 0.5) -> str:
    return f"vllm:num_requests_running {running}\nvllm:num_requests_waiting {waiting}\nvllm:kv_cache_usage_perc {kv}\n"


class FakeResponse:
    def __init__(self, text: str):
        self.status, self._text = 200, text

    async def read(self) -> bytes:
        return self._text.encode()

    async def text(self) -> str:
        return self._text


class FakeSession:
    """What the server answers: /health (None: silent, a timeout), /metrics one text a read
    (the last repeated; None: silent)."""

    def __init__(self, health: str | None, metrics: list[str | None]):
        self.health, self.metrics, self.asked = health, list(metrics), []

    def get(self, url: str, timeout=None):
        session = self

        class Call:
            async def __aenter__(self):
                path = url.removeprefix(URL)
                session.asked.append(path)
                text = session.health if path == "/health" else session.metrics[0]
                if path == "/metrics" and len(session.metrics) > 1:
                    session.metrics.pop(0)
                if text is None:
                    raise TimeoutError
                return FakeResponse(text)

            async def __aexit__(self, *exc):
                return False

        return Call()


class FakeServer:
    """What `while_serving` asks of a server: alive (it never exits), stopped or not."""

    def __init__(self, stopped: bool = False):
        self._stopped = stopped
        self.spec = type("Spec", (), {"log_path": Path("server.log")})()

    def poll_failure(self, phase):
        return None

    def processes_stopped(self) -> bool:
        return self._stopped

    def healthy(self, timeout: float = 2.0) -> bool:
        return False

    def elapsed(self) -> float:
        return 0.0


def target_stage(stopped_s: float, now_s: float) -> tuple[list[RequestRecord], float]:
    """A target stage at 2 req/s for 30 s planned, TTFT 50 ms, whose server answered nothing from
    `stopped_s` on, as its records stand at `now_s` (from the stage's start; perf_counter times)."""
    t0 = time.perf_counter() - now_s
    records = []
    for i in range(60):
        r = RequestRecord(i, "c", t0 + i * 0.5, 100, 8)
        sent = i * 0.5
        if sent <= now_s:
            r.send_time = t0 + sent
            if sent + 0.05 + 7 * 0.02 < stopped_s:
                r.chunk_times = [t0 + sent + 0.05 + k * 0.02 for k in range(8)]
                r.first_token_time, r.end_time, r.completion_tokens = r.chunk_times[0], r.chunk_times[-1], 8
        records.append(r)
    return records, t0 + now_s


def abort_fired_and_cut_off(stopped_s: float = 8.0, now_s: float = 11.0) -> list[RequestRecord]:
    """The stage as the load run leaves it: the certain rule fired, the requests in flight cut off."""
    records, now = target_stage(stopped_s, now_s)
    verdict = abort_check(SLOS, 2.0, CERTAIN)(records, now, ())
    assert verdict is not None and verdict.metric == "ttft_p95_ms" and not verdict.passed  # a certain miss
    for r in records:
        if r.send_time == r.send_time and r.end_time != r.end_time:
            r.fail(ABORTED, "stopped by the load generator", now)
    return [r for r in records if r.send_time == r.send_time]


def watching(records: list[RequestRecord], bound_s: float = BOUND_S) -> ProgressWatch:
    watch = ProgressWatch(bound_s)
    watch.track(records)
    return watch


def test_a_stage_whose_server_went_silent_as_the_abort_fired_is_a_hang_not_a_violation():
    records = abort_fired_and_cut_off()
    watch = watching(records)
    # 3 s of silence: the stall bound alone would call nothing yet, and the stage would be scored.
    assert watch.check(time.perf_counter()) is None and watch.owes(time.perf_counter())
    session = FakeSession(health=None, metrics=[None])
    with pytest.raises(ServerHung) as hung:
        asyncio.run(liveness_before_verdict(watch, URL, session))
    stall = hung.value.stall
    assert stall.evidence == "/health did not answer within 3 s" and stall.cut_off == 7 and stall.quiet_s > 2.9
    assert session.asked == ["/health"]
    # ... and the watcher of the measurement fails the trial as a hang, with the line.
    with pytest.raises(ServerFailed) as failed:
        asyncio.run(while_serving(FakeServer(), liveness_before_verdict(watch, URL, session), FailurePhase.LOAD, watch))
    failure = failed.value.failure
    assert failure.cls is FailureClass.HANG and failure.phase == FailurePhase.LOAD
    # the silence is 3 s and what the test itself took (a loaded machine rounds it up): no clock asserted
    assert re.match(r"no token and no finished request for \d+ s with 0 requests in flight and 7 cut off", failure.line)
    assert failure.line.endswith("(bound 15 s); /health did not answer within 3 s")


def test_a_live_server_lets_go_of_the_cut_off_requests_and_the_abort_stands():
    watch = watching(abort_fired_and_cut_off())
    session = FakeSession(health="OK", metrics=[gauges(6), gauges(2), gauges(0)])
    asyncio.run(liveness_before_verdict(watch, URL, session))  # no ServerHung: the verdict is scored
    assert not watch.owes(time.perf_counter())
    assert session.asked == ["/health", "/metrics", "/metrics"]  # its gauges moved on the second read


def test_an_engine_hung_behind_a_live_api_server_is_a_hang_at_the_stall_bound():
    """/health answers (the API server lives) but the engine's gauges stand still: the stall
    bound decides (a short one here, so the test does not wait long; nothing asserts on time)."""
    watch = watching(abort_fired_and_cut_off(), bound_s=4.0)  # 3 s quiet so far
    session = FakeSession(health="OK", metrics=[gauges(3)])
    with pytest.raises(ServerHung) as hung:
        asyncio.run(liveness_before_verdict(watch, URL, session))
    assert hung.value.stall.evidence is None and hung.value.stall.quiet_s >= 4.0
    assert session.asked.count("/metrics") >= 2


def test_nothing_owed_needs_no_probe():
    records, _ = target_stage(stopped_s=math.inf, now_s=40.0)  # every request answered
    session = FakeSession(health=None, metrics=[None])
    asyncio.run(liveness_before_verdict(watching(records), URL, session))
    assert session.asked == []


def test_a_server_whose_every_process_is_stopped_is_a_hang_at_the_next_poll():
    records, _ = target_stage(stopped_s=8.0, now_s=9.0)  # requests in flight, 1 s quiet
    watch = watching([r for r in records if r.send_time == r.send_time])

    async def forever() -> None:
        await asyncio.Event().wait()

    with pytest.raises(ServerFailed) as failed:
        asyncio.run(asyncio.wait_for(while_serving(FakeServer(stopped=True), forever(), FailurePhase.LOAD, watch), 30))
    failure = failed.value.failure
    assert failure.cls is FailureClass.HANG
    assert failure.line.endswith(f" with 3 requests in flight (bound 15 s); {PROCESSES_STOPPED}"), failure.line
