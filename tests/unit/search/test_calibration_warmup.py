"""The calibration's warm-up: unmeasured saturation loads, then the prefix-cache reset, before its
first round, so that the first round follows a load as every later one does. A fake server and a
scripted load (no vLLM): what is sent, in which order, and what the reference is read from."""

from types import SimpleNamespace

import pytest

import search.executor.calibration_run
from search import scenario as scenario_mod
from search.executor import calibrate, plan_trial
from tests.support.fake_server import FakeServer
from tests.support.fakes import ctx
from tests.support.paths import FIXTURES

WARM_UP_CAPACITY = 1.0  # what the scripted warm-up load reads: a cold server's slow first load
ROUND_CAPACITY = 5.0


def calibrated(tmp_path, monkeypatch, warmup_rounds: int | None):
    """The calibration of loop_calibrated.yaml (2 rounds) on a fake server; the loads and resets it
    made, in order."""
    sent: list[str] = []

    async def load(url, model, spec, options=None):
        if spec.arrival.concurrency == 1:
            sent.append(f"unloaded (warm-up {spec.warmup_requests})")
            return SimpleNamespace(flat_metrics=lambda: {"ttft_median_ms": 40.0}, records=[])
        first = not any(s.startswith("saturation") for s in sent)
        sent.append(f"saturation ({spec.num_requests} requests at {spec.arrival.concurrency} users)")
        capacity = WARM_UP_CAPACITY if first else ROUND_CAPACITY
        return SimpleNamespace(flat_metrics=lambda: {"request_throughput": capacity}, records=[])

    async def reset(url, watch=None):
        sent.append("reset")
        return True

    monkeypatch.setattr(search.executor.calibration_run, "launch", lambda *a, **kw: FakeServer(tmp_path / "log"))
    monkeypatch.setattr(search.executor.calibration_run, "run_load", load)
    monkeypatch.setattr(search.executor.calibration_run, "reset_prefix_cache", reset)
    sc = scenario_mod.load(str(FIXTURES / "scenarios" / "loop_calibrated.yaml"))[0]
    settings = {"repeats": 2} | ({} if warmup_rounds is None else {"warmup_rounds": warmup_rounds})
    sc = sc.model_copy(update={"calibration": sc.calibration.model_copy(update=settings)})
    p = plan_trial(-1, "calibration", {}, {"max_model_len": 1024}, ctx(), sc.workload.longest_request_tokens(), "loop")
    return calibrate(sc, ctx(), p.server_args, tmp_path), sent


def test_the_first_round_follows_an_unmeasured_saturation_load_and_a_reset(tmp_path, monkeypatch):
    cal, sent = calibrated(tmp_path, monkeypatch, warmup_rounds=None)
    assert sent == [
        "saturation (64 requests at 32 users)",
        "reset",
        "unloaded (warm-up 0)",
        "saturation (64 requests at 32 users)",
        "reset",
        "unloaded (warm-up 0)",
        "saturation (64 requests at 32 users)",
    ]
    # The warm-up's slow load is in no round, and the result says it ran.
    assert [r["capacity_rps"] for r in cal.rounds] == [ROUND_CAPACITY, ROUND_CAPACITY]
    assert cal.capacity_rps == ROUND_CAPACITY
    assert [r["prefix_cache_reset"] for r in cal.rounds] == [True, True]
    assert cal.warmup_rounds == 1


def test_without_warm_up_loads_the_first_round_meets_the_cold_server(tmp_path, monkeypatch):
    cal, sent = calibrated(tmp_path, monkeypatch, warmup_rounds=0)
    assert sent[:2] == ["unloaded (warm-up 2)", "saturation (64 requests at 32 users)"]
    assert [r["capacity_rps"] for r in cal.rounds] == [WARM_UP_CAPACITY, ROUND_CAPACITY]
    assert cal.rounds[0]["prefix_cache_reset"] is None and cal.warmup_rounds == 0


@pytest.mark.parametrize("stored", [{}, {"warmup_rounds": 0}])
def test_a_calibration_stored_before_the_warm_up_reads_as_made_without_one(stored):
    from search.calibration import CalibrationResult

    d = {"unloaded": {"ttft_median_ms": 40.0}, "saturation": {}, "capacity_rps": 5.0, "seconds": 60.0} | stored
    assert CalibrationResult.from_dict(d).warmup_rounds == 0
