"""The GPU knobs in the registry: version-aware like every parameter, what the CPU build does with
each, and the checks that reject a configuration before any start (devices, heads, checkpoint,
build, memory)."""

from dataclasses import replace

import pytest

from search import space
from search.scenario import Domain
from serving import parameters, server_flags
from serving.checks import check_combination, memory_budget
from serving.machine import FlagInfo
from serving.server_flags import ConfigError, resolve
from tests.support.fakes import CPU, ctx
from tests.support.gpu_contexts import GPU_FLAGS, H100, config, h100s, model_ctx

GPU_KNOBS = (
    "tensor_parallel_size",
    "quantization",
    "kv_cache_dtype",
    "enforce_eager",
    "optimization_level",
    "max_cudagraph_capture_size",
    "async_scheduling",
    "max_num_partial_prefills",
    "max_long_partial_prefills",
)
EVERY_KNOB = {
    "tensor_parallel_size": 2,
    "quantization": "fp8",
    "kv_cache_dtype": "fp8",
    "enforce_eager": False,
    "optimization_level": 1,
    "max_cudagraph_capture_size": 64,
    "async_scheduling": True,
}


def test_the_gpu_knobs_are_registry_parameters_each_said_once():
    assert set(GPU_KNOBS) <= set(parameters.REGISTRY)
    assert not set(GPU_KNOBS) & set(parameters.PASS_THROUGH)
    assert parameters.scenario_flag_problem(GPU_KNOBS) is None


def test_a_gpu_passes_every_knob_as_asked():
    c = model_ctx(hw=h100s(2))
    args = resolve(EVERY_KNOB, c)
    assert args.adjustments == [] and args.values == EVERY_KNOB
    assert args.cli(c.installed) == [
        "--tensor-parallel-size",
        "2",
        "--quantization",
        "fp8",
        "--kv-cache-dtype",
        "fp8",
        "--no-enforce-eager",
        "--optimization-level",
        "1",
        "--max-cudagraph-capture-size",
        "64",
        "--async-scheduling",
    ]


def test_the_cpu_build_drops_forces_or_passes_each_knob_as_its_rule_says():
    c = ctx(extra=GPU_FLAGS)
    args = resolve(EVERY_KNOB, c)
    assert args.values == {
        "quantization": "fp8",
        "kv_cache_dtype": "fp8",
        "enforce_eager": False,
        "optimization_level": 1,
        "async_scheduling": False,
    }
    found = {a.param: a for a in args.adjustments}
    assert {p: a.action for p, a in found.items()} == {
        "tensor_parallel_size": "dropped",
        "max_cudagraph_capture_size": "dropped",
        "async_scheduling": "forced",
    }
    assert found["tensor_parallel_size"].detail.startswith("the CPU build runs each server as one rank")
    assert found["max_cudagraph_capture_size"].detail == "the CPU build captures no CUDA graphs; not passed"
    assert found["async_scheduling"].detail == (
        "the CPU build turns async scheduling off itself (vllm/platforms/cpu.py); passed as False"
    )
    assert found["async_scheduling"].replacement == ("async_scheduling", False)
    assert resolve({"async_scheduling": False}, c).adjustments == []  # asked for what it gets: nothing to say


def test_the_search_space_leaves_out_what_the_cpu_build_drops_or_forces_in_the_same_words():
    c = ctx(extra=GPU_FLAGS)
    domains = {
        "tensor_parallel_size": Domain(choices=[1, 2]),
        "async_scheduling": Domain(choices=[True, False]),
        "kv_cache_dtype": Domain(choices=["auto", "fp8"]),
        "enforce_eager": Domain(choices=[True, False]),
    }
    dists, notes = space.active_space(domains, c, "x")
    assert set(dists) == {"kv_cache_dtype", "enforce_eager"}
    for name in ("tensor_parallel_size", "async_scheduling"):
        found = server_flags.support(parameters.REGISTRY[name], c, domains)
        assert f"{name}: {found.dropped('not searched')}" in notes
    assert set(space.active_space(domains, model_ctx(hw=h100s(2)), "x")[0]) == set(domains)


def test_choices_come_from_the_installed_parser_and_the_cpu_builds_kernels():
    c = model_ctx()
    parsed = FlagInfo(("--kv-cache-dtype",), "kv_cache_dtype", "str", "auto", ("auto", "fp8", "fp8_e5m2"), False)
    c = replace(c, installed=replace(c.installed, flags={**c.installed.flags, "--kv-cache-dtype": parsed}))
    with pytest.raises(ConfigError, match=r"kv_cache_dtype='int4' is not allowed; allowed: auto, fp8, fp8_e5m2$"):
        resolve({"kv_cache_dtype": "int4"}, c)
    with pytest.raises(
        ConfigError,
        match=r"kv_cache_dtype='bfloat16' is not allowed; allowed: auto, fp8, "
        r"fp8_e4m3, fp8_e5m2$",
    ):
        resolve({"kv_cache_dtype": "bfloat16"}, ctx(extra=GPU_FLAGS))
    with pytest.raises(ConfigError, match=r"quantization='--awq' is not allowed; allowed: a word not starting"):
        resolve({"quantization": "--awq"}, c)  # no choices in the parser: any word, never a flag


def test_each_knob_follows_the_installed_vllm():
    old = model_ctx(version="0.10.1", extra=["--max-num-partial-prefills"])
    assert resolve({"max_num_partial_prefills": 2}, old).flags == {"max-num-partial-prefills": 2}  # V0: acts
    v1 = model_ctx(version="0.20.0", extra=["--max-num-partial-prefills"])
    [adj] = resolve({"max_num_partial_prefills": 2}, v1).adjustments
    assert adj.action == "dropped" and "the V1 engine refuses any value but 1" in adj.detail
    [adj] = resolve({"max_num_partial_prefills": 2}, model_ctx()).adjustments
    assert adj.detail.startswith("--max-num-partial-prefills is removed in vLLM 0.27.0")
    no_levels = model_ctx()
    no_levels = replace(
        no_levels,
        installed=replace(
            no_levels.installed,
            flags={k: v for k, v in no_levels.installed.flags.items() if k != "--optimization-level"},
        ),
    )
    [adj] = resolve({"optimization_level": 3}, no_levels).adjustments
    assert adj.detail == (
        "--optimization-level is not a flag; the installed vllm 0.32.0 does not accept it; not passed"
    )


@pytest.mark.parametrize(
    "name, gpus, tp, fragments",
    [
        ("llama-3-8b", 1, 2, ["tensor_parallel_size 2 needs 2 GPUs; 1 visible (1x NVIDIA H100 80GB HBM3"]),
        (
            "llama-3-8b",
            4,
            3,
            [
                "does not divide the model's 32 attention heads",
                "must divide the model's 8 KV heads",
                "does not divide the model's MLP width (14336)",
            ],
        ),
        ("qwen2.5-7b", 8, 8, ["tensor_parallel_size 8 does not divide the model's 28 attention heads"]),
        ("qwen2.5-7b", 4, 4, []),  # 4 KV heads, one per GPU
        ("llama-3-70b", 8, 8, []),
    ],
)
def test_tensor_parallelism_is_checked_against_the_devices_and_the_heads(name, gpus, tp, fragments):
    problems = check_combination({"tensor_parallel_size": tp}, model_ctx(name, hw=h100s(gpus)))
    assert len(problems) == len(fragments)
    for problem, fragment in zip(problems, fragments):
        assert fragment in problem


def test_kv_heads_fewer_than_gpus_are_replicated_but_must_divide_them():
    cfg = config("qwen2.5-7b") | {"num_attention_heads": 24, "num_key_value_heads": 4, "intermediate_size": 18432}
    assert check_combination({"tensor_parallel_size": 8}, model_ctx(cfg=cfg, hw=h100s(8))) == []
    cfg = cfg | {"num_key_value_heads": 3}
    [problem] = check_combination({"tensor_parallel_size": 8}, model_ctx(cfg=cfg, hw=h100s(8)))
    assert "must divide the model's 3 KV heads, or be a multiple of them" in problem


def test_the_quantization_is_checked_against_the_checkpoint():
    full = model_ctx()
    assert check_combination({"quantization": "fp8"}, full) == []  # quantized while loading
    [problem] = check_combination({"quantization": "awq"}, full)
    assert problem == (
        "quantization awq loads only a checkpoint quantized with it; the model's config.json has no quantization_config"
    )
    awq = model_ctx(
        cfg=config("llama-3-8b") | {"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}
    )
    assert check_combination({"quantization": "awq_marlin"}, awq) == []  # its own kernels
    [problem] = check_combination({"quantization": "gptq"}, awq)
    assert problem == "quantization gptq contradicts the checkpoint's quantization_config (awq): vLLM refuses the pair"


def test_fp8_kv_on_the_cpu_build_needs_avx512_or_amx_and_a_head_size_of_32s():
    values = {"kv_cache_dtype": "fp8"}
    [problem] = check_combination(values, ctx(extra=GPU_FLAGS))
    assert problem == "kv_cache_dtype fp8 on the CPU build needs AVX-512 or AMX; this CPU (test) has neither"
    avx512 = replace(CPU, cpu_flags=frozenset({"avx512f"}))
    assert check_combination(values, ctx(hw=avx512, extra=GPU_FLAGS)) == []
    assert check_combination(values, model_ctx(hw=H100)) == []


def test_a_configuration_that_cannot_hold_one_request_is_rejected_with_the_arithmetic():
    [problem] = check_combination({}, model_ctx("llama-3-70b"))  # 131 GiB of weights, one GPU
    assert problem.startswith(
        "memory_utilization 0.92 leaves no memory for the KV cache, less than one "
        "8192-token request needs (0.92 x 79.6 GiB = 73.23 GiB per GPU, less weights 131.42 GiB"
    )
    assert check_combination({"tensor_parallel_size": 4}, model_ctx("llama-3-70b", hw=h100s(4))) == []
    assert check_combination({"memory_utilization": 0.25}, model_ctx()) == []
    [problem] = check_combination({"memory_utilization": 0.23}, model_ctx())
    assert problem.startswith(
        "memory_utilization 0.23 leaves a KV cache of 7,696 tokens, less than one 8192-token "
        "request needs (0.23 x 79.6 GiB = 18.31 GiB per GPU"
    )
    assert check_combination({"memory_utilization": 0.23, "max_model_len": 1024}, model_ctx()) == []


def test_the_kv_cache_dtype_and_the_serving_dtype_size_the_cpu_cache():
    # The fake model: 4 layers x 4 KV heads x 64, served in float32 (8 KiB per token); fp8 stores a quarter.
    c = ctx(extra=GPU_FLAGS, hw=replace(CPU, cpu_flags=frozenset({"avx512f"})))
    assert memory_budget({"memory_utilization": 0.25}, c).tokens == 2**28 // 8192
    assert memory_budget({"memory_utilization": 0.25, "kv_cache_dtype": "fp8"}, c).tokens == 2**28 // 2048
    assert check_combination({"memory_utilization": 0.02, "max_model_len": 8192, "kv_cache_dtype": "fp8"}, c) == []
    [problem] = check_combination({"memory_utilization": 0.02, "max_model_len": 8192}, c)
    assert (
        "leaves a KV cache of 2,560 tokens, less than one 8192-token request needs (--kv-cache-memory-bytes" in problem
    )
    assert memory_budget({}, c) is None  # no memory_utilization: vLLM sizes the cache from the node's RAM


def test_a_kv_cache_pinned_in_bytes_is_taken_as_given_on_a_gpu_and_refused_on_the_cpu_build():
    # Llama-3-8B: 128 KiB per token in bf16; 6 GiB are 49,152 tokens whatever memory_utilization says.
    c = model_ctx(extra=["--kv-cache-memory-bytes"])
    pinned = {"memory_utilization": 0.16, "kv_cache_memory_bytes": 6 * 2**30}
    assert memory_budget(pinned, c).tokens == 49_152
    on_two = model_ctx(
        hw=h100s(2), extra=["--kv-cache-memory-bytes"]
    )  # the bytes are per GPU, each with half the KV heads
    assert memory_budget({**pinned, "tensor_parallel_size": 2}, on_two).tokens == 98_304
    assert check_combination(pinned, c) == []  # 0.16 x 79.6 GiB would not hold the weights, but it is not profiled
    assert resolve(pinned, c).flags == {"gpu-memory-utilization": 0.16, "kv-cache-memory-bytes": 6 * 2**30}
    with pytest.raises(
        ConfigError,
        match="kv_cache_memory_bytes is for GPUs; on the CPU build memory_utilization sets --kv-cache-memory-bytes",
    ):
        resolve(pinned, ctx(extra=["--kv-cache-memory-bytes"]))
