"""The replay's statistics table: a faithful replay meets every target, a distorted one does not."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.bench_trace_replay import Stage, planned, table
from benchmarks.trace_synthetic import mooncake_jsonl, synthetic_trace
from loadgen import WorkloadSpec
from loadgen.trace import replay_offsets


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "day.jsonl"
    path.write_text(mooncake_jsonl(synthetic_trace(1200, seed=5)))
    data = {"trace": {"file": str(path), "max_total_tokens": 4096}, "arrival": {"mode": "trace", "rate": 4.0}}
    return WorkloadSpec.model_validate({**data, "duration_s": 50, "seed": 1})


def faithful(wl: WorkloadSpec) -> Stage:
    """What a server receives from a replay that keeps its schedule and lengths exactly."""
    stage = Stage(4.0, 200, np.zeros(0), None, np.zeros(0), {}, 0)
    _, rows, share, prompts = planned(wl, stage, 128)
    trace = wl.replayed_trace()

    sent = replay_offsets(trace, wl.seed, 200, 4.0)
    server = {"prefix_cache_queries": float(prompts.sum()), "prefix_cache_hits": share * prompts.sum()}
    return Stage(4.0, 200, sent, prompts, trace.output_tokens[rows], server, 0)


def test_a_faithful_replay_meets_every_target(workload):
    rows, _ = table(workload, faithful(workload), 128)
    assert all(ok is not False for *_, ok in rows)
    assert {r[0] for r in rows} >= {"mean rate (req/s)", "inter-arrival CV", "prompt tokens p99", "output tokens max"}
    assert any(r[0].startswith("prompt tokens shared") for r in rows)


def test_a_distorted_replay_is_flagged(workload):
    good = faithful(workload)
    slow = Stage(4.0, 200, good.sent_s * 1.05, good.prompt_tokens, good.output_tokens, good.server, 0)
    missed = {name for name, *_, ok in table(workload, slow, 128)[0] if ok is False}
    assert missed == {"mean rate (req/s)"}  # scaled time: the CV stays, the rate does not
    poisson = Stage(4.0, 200, np.arange(200) / 4.0, good.prompt_tokens + 2, good.output_tokens, {}, 0)
    missed = {name for name, *_, ok in table(workload, poisson, 128)[0] if ok is False}
    assert "inter-arrival CV" in missed and "prompt tokens p50" in missed
