"""The anatomy of real GPU starts (vLLM 0.26.0, the Llama-3-8B shape with dummy weights, TP 1;
tests/fixtures/logs/gpu/): on an H100, the first start on the machine (torch.compile's cache cold)
and a warm one, both exec'd as vLLM starts itself; on an H200, a warm start exec'd and unmodified
and one forked by the study's zygote with the tuner's plugin. The H100 logs do not say when the
tuner spawned the server; both are read as spawned 28 s before the API server's first line (its
imports, by the tuner's clock)."""

from datetime import datetime

from serving import start_anatomy
from tests.support.paths import REPO

LOGS = REPO / "tests" / "fixtures" / "logs" / "gpu"
FIRST, WARM = LOGS / "h100-llama3-8b-dummy-first-start.log", LOGS / "h100-llama3-8b-dummy-warm-start.log"
BEFORE, TUNER = LOGS / "h200-llama3-8b-dummy-before.log", LOGS / "h200-llama3-8b-dummy-tuner-warm.log"


def read(path, spawned: datetime, healthy_s: float):
    return start_anatomy(path.read_text(errors="replace"), spawned, healthy_s)


def test_a_warm_start_splits_into_vllms_gpu_phases():
    a = read(WARM, datetime(2026, 11, 27, 9, 21, 14), 120.6)  # /health: 09:23:14 and a bit
    s = {k: round(v) for k, v in a.phases.items() if v is not None}
    assert s == {
        "import": 28,
        "model config": 0,  # the model's class was inspected by the first start, and cached
        "engine process": 26,  # spawned: a new interpreter imports torch and vLLM again
        "worker process": 3,  # one GPU: the EngineCore's device and NCCL set-up
        "model load": 6,
        "compile": 6,
        "KV cache": 3,
        "kernel warm-ups": 15,  # the MoE router GEMMs' warm-up, on a dense model
        "CUDA graphs": 9,
        "warm-up": 23,  # after capture: the sampler's JIT run, inductor's lazy init, the JIT monitor
        "API server": 1,
        "health": 0,
    }
    assert a.missing == ["first token", "load warm-up"]  # the executor adds those
    assert a.cached_compile is True
    assert a.reported == {
        "weights_s": 6.521319,
        "torch_compile_s": 4.87,
        "dynamo_s": 2.98,
        "compile_from_cache_s": 1.59,
        "cuda_graphs_s": 9.0,
        "engine_init_s": 55.52,
    }


def test_the_first_start_on_a_machine_compiles_and_inspects_the_model_in_a_subprocess():
    a = read(FIRST, datetime(2026, 11, 27, 9, 17, 43), 167.6)
    s = {k: round(v) for k, v in a.phases.items() if v is not None}
    assert s["model config"] == 26  # vLLM's model inspection subprocess imports vLLM again
    assert s["engine process"] == 22
    assert s["compile"] == 29 and a.cached_compile is False
    assert a.reported["inductor_compile_s"] == 12.97 and a.reported["torch_compile_s"] == 28.23
    assert s["kernel warm-ups"] == 20 and s["CUDA graphs"] == 7 and s["warm-up"] == 21


def test_the_load_warm_up_is_the_time_from_the_first_token_to_the_first_measured_request():
    a = read(WARM, datetime(2026, 11, 27, 9, 21, 14), 120.6).with_first_token(2.0, 20.0)
    assert a.phases["first token"] == 2.0 and a.phases["load warm-up"] == 18.0
    assert a.missing == []


def test_a_start_forked_by_the_zygote_with_the_plugin_pays_no_import_spawn_or_router_warm_up():
    """The same machine and warm caches, one start each way: the forked start has no import, no
    spawned EngineCore and no MoE router warm-up, and answers /health in about a quarter of the
    time. /health: 21.3 s after the tuner's fork, 79.7 s after the exec'd spawn."""
    before = read(BEFORE, datetime(2026, 11, 27, 13, 29, 55, 830000), 79.7)
    after = read(TUNER, datetime(2026, 11, 27, 13, 31, 27, 240000), 21.3)
    b = {k: round(v) for k, v in before.phases.items() if v is not None}
    a = {k: round(v) for k, v in after.phases.items() if v is not None}
    assert b["engine process"] == 17 and a["engine process"] == 0  # spawned, imports again / forked
    assert b["kernel warm-ups"] == 15 and a["kernel warm-ups"] == 0  # the MoE router GEMMs: skipped
    assert b["warm-up"] >= 1 and a["warm-up"] <= 1
    assert a["import"] <= 1 < b["import"]  # the zygote imported vLLM once, before this start
    assert sum(after.phases[k] or 0 for k in after.phases) < 0.3 * sum(before.phases[k] or 0 for k in before.phases)
