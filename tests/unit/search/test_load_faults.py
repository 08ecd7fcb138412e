"""What a trial and the calibration do when the load generator raises or the server dies under
load: a fake server (no vLLM) and a load run that fails or never ends."""

import asyncio
import re
import time

import pytest

import search.executor.calibration_run
import search.executor.vllm
from loadgen.loadrun import LoadRunError
from loadgen.request_record import RequestRecord
from loadgen.stall import stall_bound_s
from search import scenario as scenario_mod
from search.executor import CalibrationFailed, Measurement, VllmExecutor, calibrate, plan_trial
from serving import FailureClass
from storage.tables import TrialStatus
from tests.support.fake_server import OOM, FakeServer
from tests.support.fakes import ctx
from tests.support.paths import FIXTURES
from tests.support.study_loop import LOOP_SCENARIO

NO_MODEL = "http://127.0.0.1:9 serves no model"


async def fails_at_once(*args, **kw):
    raise LoadRunError(NO_MODEL)


CANCELLED: list[str] = []


async def cancellable(name: str, seconds: float) -> None:
    """Waits `seconds`, long enough that only the watch ends it first: then it notes `name`."""
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        CANCELLED.append(name)
        raise


async def never_ends(*args, **kw):
    await cancellable("never_ends", 10)


class FakeClock:
    """The executor's clock: its sleeps (the grace a dying server gets to exit) pass at once."""

    now = 0.0

    def monotonic(self) -> float:
        return self.now

    perf_counter = monotonic

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def trial(tmp_path, monkeypatch, server: FakeServer, load):
    monkeypatch.setattr(search.executor.vllm, "time", FakeClock())
    monkeypatch.setattr(search.executor.vllm, "launch", lambda *a, **kw: server)
    monkeypatch.setattr(search.executor.vllm, "run_load", load)
    sc = scenario_mod.load(str(LOOP_SCENARIO))[0]
    p = plan_trial(0, None, {}, {"max_model_len": 1024}, ctx(), sc.workload.longest_request_tokens(), "loop")
    return VllmExecutor(ctx(), Measurement(sc.workload), tmp_path).run(p)


def test_a_load_run_error_fails_the_trial_with_its_message(tmp_path, monkeypatch):
    server = FakeServer(tmp_path / "server.log")
    outcome = trial(tmp_path, monkeypatch, server, fails_at_once)
    assert outcome.status == TrialStatus.FAILED and server.stopped
    assert (outcome.failure.cls, outcome.failure.phase, outcome.failure.line) == (
        FailureClass.LOAD_ERROR,
        "load",
        NO_MODEL,
    )


def test_any_other_load_generator_error_is_named_by_its_type(tmp_path, monkeypatch):
    async def bug(*args, **kw):
        raise KeyError("ttft_ms")

    outcome = trial(tmp_path, monkeypatch, FakeServer(tmp_path / "server.log"), bug)
    assert (outcome.failure.cls, outcome.failure.line) == (FailureClass.LOAD_ERROR, "KeyError: 'ttft_ms'")


def test_a_server_that_died_under_the_failing_load_is_the_cause(tmp_path, monkeypatch):
    outcome = trial(tmp_path, monkeypatch, FakeServer(tmp_path / "server.log", dies_after_polls=0), fails_at_once)
    assert (outcome.failure.cls, outcome.failure.phase) == (FailureClass.OOM, "load")


async def reset_at_once(url, watch=None) -> bool:
    return True


def calibrated(tmp_path, monkeypatch, server: FakeServer, load):
    monkeypatch.setattr(search.executor.calibration_run, "launch", lambda *a, **kw: server)
    monkeypatch.setattr(search.executor.calibration_run, "run_load", load)
    monkeypatch.setattr(search.executor.calibration_run, "reset_prefix_cache", reset_at_once)
    sc = scenario_mod.load(str(FIXTURES / "scenarios" / "loop_calibrated.yaml"))[0]
    p = plan_trial(-1, "calibration", {}, {"max_model_len": 1024}, ctx(), sc.workload.longest_request_tokens(), "loop")
    return calibrate(sc, ctx(), p.server_args, tmp_path)


def test_calibration_stops_at_once_when_its_server_dies_under_load(tmp_path, monkeypatch):
    server = FakeServer(tmp_path / "calibration" / "server.log", dies_after_polls=2)
    CANCELLED.clear()
    with pytest.raises(CalibrationFailed) as failed:
        calibrated(tmp_path, monkeypatch, server, never_ends)
    assert CANCELLED == ["never_ends"] and server.stopped  # the load was cut short, not run out
    assert str(failed.value) == (
        f"the vLLM-defaults server failed: oom (calibration): {OOM.line} "
        f"(log: {tmp_path / 'calibration' / 'server.log'})"
    )


def test_calibration_names_the_load_generator_error(tmp_path, monkeypatch):
    server = FakeServer(tmp_path / "calibration" / "server.log")
    with pytest.raises(CalibrationFailed, match=f"^the load generator failed: LoadRunError: {NO_MODEL}$"):
        calibrated(tmp_path, monkeypatch, server, fails_at_once)
    assert server.stopped


async def one_request_never_answered(*args, options, **kw):
    """A load run whose only request was sent and never hears back: a hung server."""
    records = [RequestRecord(0, "default", time.perf_counter(), 10, 10, send_time=time.perf_counter())]
    options.watch.track(records)
    await cancellable("one_request_never_answered", 30)


def test_calibration_fails_as_hang_when_its_server_stops_answering(tmp_path, monkeypatch):
    monkeypatch.setattr(search.executor.calibration_run, "FIRST_STALL_BOUND_S", 1.0)
    server = FakeServer(tmp_path / "calibration" / "server.log")
    CANCELLED.clear()
    with pytest.raises(
        CalibrationFailed,
        # how long it went without a token is read when the watch next looks: 1 s, or more on a
        # loaded machine; the bound it broke is the one set
        match=re.escape("the vLLM-defaults server failed: hang (calibration): no token and no finished request for ")
        + r"\d+"
        + re.escape(" s with 1 request in flight (bound 1 s); /health did not answer"),
    ):
        calibrated(tmp_path, monkeypatch, server, one_request_never_answered)
    assert CANCELLED == ["one_request_never_answered"] and server.stopped  # cut short, not run out


def test_the_calibrations_first_loads_allow_a_long_prefill_then_a_trials_bound(tmp_path, monkeypatch):
    """Before any class's unloaded TTFT is known a load (the warm-up's, the first class's alone) may
    go FIRST_STALL_BOUND_S without a token (a long prompt alone on a slow CPU); once one is, 5 x
    the slowest, as a trial's bound."""
    bounds: list[float] = []

    class Measured:
        records = ()

        def flat_metrics(self):
            return {"ttft_median_ms": 8000.0, "request_throughput": 1.0}

    async def measured(*args, options, **kw):
        bounds.append(options.watch.bound_s)
        if len(bounds) == 3:  # the warm-up, the unloaded class, then the saturation run
            raise RuntimeError("enough")
        return Measured()

    with pytest.raises(CalibrationFailed):
        calibrated(tmp_path, monkeypatch, FakeServer(tmp_path / "calibration" / "server.log"), measured)
    first = search.executor.calibration_run.FIRST_STALL_BOUND_S
    assert bounds == [first, first, 40.0] and first > stall_bound_s()
