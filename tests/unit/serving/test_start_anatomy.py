"""The anatomy of a start, read from real vLLM 0.32 (CPU) and 0.26-worded (GPU) log excerpts."""

from datetime import datetime
from pathlib import Path

import pytest

from serving import START_PHASES, describe_start_anatomy, start_anatomy

LOGS = Path(__file__).parents[2] / "fixtures" / "logs"
# A real start here (tests/fixtures/logs/start_cpu_0.32.log): spawned at 18:43:01.41, /health
# answered after 26.94 s, the first token after 26.98 s. Each line's arrival was also stamped by
# a reader of the file at 50 ms: the API server's first line at 8.2 s, EngineCore's at 16.5,
# "Starting to load model" at 24.3, weights 24.5, KV cache 25.3, init engine 25.4, server 26.3.
CPU_SPAWN = datetime(2026, 11, 25, 18, 43, 1, 407792)
CPU_STAMPED = {
    "import": 8.2,
    "engine process": 16.5,
    "worker process": 24.3,
    "model load": 24.5,
    "KV cache": 25.3,
    "warm-up": 25.4,
    "API server": 26.3,
}


def ends(phases):
    out, at = {}, 0.0
    for name, s in phases.items():
        if s is not None:
            at += s
            out[name] = at
    return out


def test_a_real_cpu_start_splits_into_every_phase_within_a_second_of_the_lines_arrival():
    a = start_anatomy((LOGS / "start_cpu_0.32.log").read_text(), CPU_SPAWN, 26.94, 26.98)
    assert list(a.phases) == list(START_PHASES)
    # an eager CPU server compiles and captures nothing; the load's warm-up is the executor's to add
    assert a.missing == ["compile", "kernel warm-ups", "CUDA graphs", "load warm-up"]
    at = ends(a.phases)
    for name, stamped in CPU_STAMPED.items():
        assert at[name] == pytest.approx(stamped, abs=1.0), name
    assert at["health"] == pytest.approx(26.94) and at["first token"] == pytest.approx(26.98)
    assert a.reported == {"weights_s": 0.08, "engine_init_s": 0.12}
    assert a.as_dict()["phases"]["import"] == pytest.approx(8.09, abs=0.01)


def test_the_gpu_wording_of_0_26_gives_the_model_load_compile_and_graph_capture():
    spawned = datetime(2026, 11, 25, 16, 0, 4)
    a = start_anatomy((LOGS / "start_gpu_0.26.log").read_text(), spawned, 61.2, 61.6)
    at = ends(a.phases)
    # a single GPU loads the model in the EngineCore process: no worker process of its own, and
    # "Starting to load model" marks the engine ready to load
    assert at["engine process"] == pytest.approx(17.5)
    assert at["model load"] == pytest.approx(21.5)
    assert at["KV cache"] == pytest.approx(50.5)  # torch.compile runs in the profiling pass
    assert at["warm-up"] == pytest.approx(59.5)  # CUDA graphs
    assert at["API server"] == pytest.approx(60.5)
    assert a.reported == {"weights_s": 1.204455, "torch_compile_s": 24.81, "cuda_graphs_s": 9.0, "engine_init_s": 37.95}


def test_a_missing_line_is_reported_missing_and_its_seconds_go_to_the_next_phase_found():
    text = "\n".join(
        line
        for line in (LOGS / "start_cpu_0.32.log").read_text().splitlines()
        if "KV cache size" not in line and "Starting vLLM server" not in line
    )
    a = start_anatomy(text, CPU_SPAWN, 26.94)
    assert a.missing == [
        "compile",
        "KV cache",
        "kernel warm-ups",
        "CUDA graphs",
        "API server",
        "first token",
        "load warm-up",
    ]
    at = ends(a.phases)
    assert at["warm-up"] == pytest.approx(CPU_STAMPED["warm-up"], abs=1.0)
    assert at["health"] == pytest.approx(26.94)  # the phases found still add up to the start
    assert "missing: compile, KV cache, kernel warm-ups, CUDA graphs, API server" in describe_start_anatomy(a.as_dict())


def test_a_log_without_timestamps_leaves_all_to_the_health_check():
    a = start_anatomy("Traceback (most recent call last):\n", CPU_SPAWN, 30.0)
    assert a.phases["health"] == pytest.approx(30.0)
    assert a.missing == [p for p in START_PHASES if p != "health"]


def test_a_line_stamped_in_the_second_before_the_spawn_counts_from_the_spawn():
    """Lines are stamped to the second: none may land before the spawn or after /health."""
    text = (
        "(APIServer pid=1) INFO 11-25 18:43:01 [api_utils.py:1] x\n"
        "(EngineCore pid=2) INFO 11-25 18:43:40 [core.py:1] Initializing a V1 LLM engine\n"
    )
    a = start_anatomy(text, CPU_SPAWN, 20.0)
    assert a.phases["import"] == pytest.approx(0.09, abs=0.01)
    assert ends(a.phases)["engine process"] == pytest.approx(20.0) and a.phases["health"] == 0.0
