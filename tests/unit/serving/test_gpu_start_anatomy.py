"""The anatomy of two real GPU starts (vLLM 0.26.0, one H100, the Llama-3-8B shape with dummy
weights; ../shared/gpu/logs/): the first on the machine, torch.compile's cache cold, and a warm
one. The logs do not say when the tuner spawned the server; both are read as spawned 28 s before
the API server's first line (its imports, by the tuner's clock)."""

from datetime import datetime

import pytest

from serving import start_anatomy
from tests.support.paths import REPO

LOGS = REPO.parent / "shared" / "gpu" / "logs"
FIRST, WARM = LOGS / "h100-llama3-8b-dummy-first-start.log", LOGS / "h100-llama3-8b-dummy-warm-start.log"
pytestmark = pytest.mark.skipif(not WARM.exists(), reason="../shared/gpu/logs/ is not beside this checkout")


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
