"""Every stage row of a staged run on the stub server carries its request samples, the warm-up left
out.
"""

from __future__ import annotations

import asyncio

import pytest

from loadgen.workload import WorkloadSpec
from objectives.scoring import SLOSpec
from objectives.stages import CapacitySpec
from search.executor import StagedLoad, run_stages
from search.trial_results import stage_columns
from tests.support.stub_server import StubConfig, StubServer


def test_every_stage_row_carries_its_samples(tok_dir, tok):
    workload = WorkloadSpec.model_validate(
        {
            "endpoint": "completions",
            "prompt_tokens": 20,
            "output_tokens": 4,
            "warmup_requests": 2,
            "arrival": {"mode": "constant", "rate": 4.0},
            "num_requests": 6,
        }
    )
    spec = CapacitySpec(max_stages=1, idle_timeout_s=10, early_abort="off")  # every request runs out
    with StubServer(StubConfig(root=str(tok_dir), ttft_ms=20, itl_ms=0), tokenizer=tok) as s:
        run = asyncio.run(
            run_stages(s.base_url, None, StagedLoad(workload, [SLOSpec(metric="ttft_p90_ms", max=5000.0)], spec))
        )
    assert len(run.stages) == 2
    for stage in run.stages:
        row = stage_columns(stage)
        samples = row["samples"]
        assert len(samples["sent_s"]) == stage.requests_sent  # the warm-up left out
        assert all(0 <= t <= stage.planned_s + 0.5 for t in samples["sent_s"])
        assert all(0.015 < t < 1.0 for t in samples["ttft_s"]) and all(samples["ok"])
        assert "stopped_passing" not in row
        assert row["stage_requests"] == 6 and row["mix"]["sent"] == {"default": 6} and "steady" in row
    assert run.stages[0].samples["sent_s"][0] == pytest.approx(0.25, abs=0.05)  # 1 / rate from the stage's start
