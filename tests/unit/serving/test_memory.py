"""The memory arithmetic against published figures: configs/models/ (the models' own config.json)
and what vLLM logs for Llama-3-8B on one H100. No GPU, no vLLM."""

import json

import pytest

from serving.model import memory
from serving.model.memory import GIB, ModelShape, Quantization
from tests.support.gpu_contexts import config


def shape(name: str, **override) -> ModelShape:
    return ModelShape.from_config({**config(name), **override})


@pytest.mark.parametrize(
    "name, billions, weights_gib, kv_bf16",
    [
        ("llama-3-8b", 8.03, 14.96, 131_072),
        ("llama-3-70b", 70.55, 131.4, 327_680),
        ("qwen2.5-7b", 7.62, 14.19, 57_344),
    ],
)
def test_published_parameters_weights_and_kv_per_token(name, billions, weights_gib, kv_bf16):
    s = shape(name)
    assert s.parameters / 1e9 == pytest.approx(billions, abs=0.005)
    assert s.weight_bytes("bfloat16") / GIB == pytest.approx(weights_gib, rel=0.001)
    assert memory.kv_bytes_per_token(s.layers, s.kv_heads, s.head_dim, 2) == kv_bf16
    assert memory.kv_bytes_per_token(s.layers, s.kv_heads, s.head_dim, 1) == kv_bf16 // 2  # fp8


def test_qwen2_counts_its_qkv_biases_without_a_config_key():
    with_biases, llama_style = shape("qwen2.5-7b"), shape("qwen2.5-7b", model_type="llama")
    assert with_biases.qkv_bias and not llama_style.qkv_bias
    assert with_biases.parameters - llama_style.parameters == 28 * (28 + 2 * 4) * 128


def test_tied_embeddings_count_the_vocabulary_once():
    assert shape("llama-3-8b").parameters - shape("llama-3-8b", tie_word_embeddings=True).parameters == 128_256 * 4096


def vllm_h100(s: ModelShape, **kw) -> memory.KvBudget:
    """vLLM's defaults on one H100 80GB: 8192 batched tokens, 1024 sequences, compiled, blocks of 16."""
    args = (
        dict(
            device_bytes=int(79.6 * GIB),
            utilization=0.9,
            dtype="bfloat16",
            element_bytes=2,
            block_size=16,
            batched_tokens=8192,
            seqs=1024,
            cuda_graphs=True,
        )
        | kw
    )
    return memory.gpu_budget(s, memory.GpuServing(**args))


def test_llama3_8b_on_one_h100_lands_where_vllm_reports():
    # vLLM: "Model loading took 14.99 GiB", a KV cache of about 430-470 k tokens at 0.9 (by version
    # and CUDA graph memory).
    s = shape("llama-3-8b")
    assert s.weight_bytes("bfloat16") / GIB == pytest.approx(14.99, rel=0.01)
    budget = vllm_h100(s)
    assert 430_000 <= budget.tokens <= 470_000
    assert budget.tokens % 16 == 0 and budget.bytes_per_token == 131_072
    assert "0.90 x 79.6 GiB = 71.64 GiB per GPU, less weights 14.96 GiB" in budget.explain()
    eager = vllm_h100(s, cuda_graphs=False)
    assert eager.tokens - budget.tokens == pytest.approx(memory.GRAPH_BYTES_PER_LAYER * 32 / 131_072, abs=16)
    assert vllm_h100(s, element_bytes=1).tokens == pytest.approx(2 * budget.tokens, abs=16)  # fp8 KV


def test_tensor_parallelism_divides_weights_and_kv_heads_per_gpu():
    s = shape("llama-3-70b")
    alone, four = vllm_h100(s), vllm_h100(s, tp=4)
    assert alone.kv_bytes < 0 and alone.tokens == 0 and "GiB short, no KV cache" in alone.explain()
    assert dict(four.taken)["weights"] == s.weight_bytes("bfloat16") // 4
    assert four.bytes_per_token == 327_680 // 4
    assert four.tokens > 400_000


def test_weights_quantized_on_the_fly_or_by_the_checkpoint():
    s = shape("llama-3-8b")
    fp8 = s.weight_bytes("bfloat16", "fp8")
    # The decoder's linear weights at one byte, embeddings and lm_head still bf16 (vLLM: ~8.5 GiB).
    assert fp8 == s.weight_bytes("bfloat16") - s.linear_parameters
    awq = shape(
        "llama-3-8b", torch_dtype="float16", quantization_config={"quant_method": "awq", "bits": 4, "group_size": 128}
    )
    assert awq.quantization == Quantization("awq", 4 + 20 / 128)
    assert 5.2 < awq.weight_bytes("float16") / GIB < 5.5  # vLLM logs ~5.4 GiB for a 4-bit AWQ Llama-3-8B
    assert s.weight_bytes("bfloat16", "awq") is None  # needs a quantized checkpoint: not sized


def test_a_separate_quantize_config_is_read_with_the_method_its_file_means(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(config("llama-3-8b")))
    (tmp_path / "quantize_config.json").write_text(json.dumps({"bits": 4, "group_size": 128}))
    assert memory.read_shape(tmp_path).quantization == Quantization("gptq", 4 + 20 / 128)


def test_what_the_arithmetic_does_not_model_is_not_sized(tmp_path):
    moe = shape("llama-3-8b", num_local_experts=8)
    assert moe.unmodelled == "mixture-of-experts layers" and moe.weight_bytes("bfloat16") is None
    (tmp_path / "config.json").write_text(json.dumps({"n_layer": 12}))  # not Llama's key names
    assert memory.read_shape(tmp_path) is None
    assert memory.read_shape(tmp_path / "missing") is None


def test_serving_and_cache_dtypes():
    assert memory.serving_dtype("float32", None) == "bfloat16"  # vLLM's auto
    assert memory.serving_dtype("float32", "float") == "float32"
    assert memory.cache_bytes("auto", "float32") == 4 and memory.cache_bytes(None, "bfloat16") == 2
    assert memory.cache_bytes("fp8_e5m2", "bfloat16") == 1
    assert memory.cache_bytes("nvfp4", "bfloat16") is None  # packed with scales: not modelled


def test_the_cpu_cache_is_the_bytes_given_in_whole_blocks():
    budget = memory.bytes_budget(268_435_456, 4096, 128)
    assert budget.tokens == 65_536 and budget.tolerance == 0
    assert memory.bytes_budget(4096 * 128 * 3 - 1, 4096, 128).tokens == 256
    assert budget.explain() == "--kv-cache-memory-bytes 268,435,456 (256 MiB) at 4,096 bytes per token = 65,536 tokens"


def test_a_gpu_estimate_rejects_only_beyond_its_tolerance_and_the_cpu_one_is_exact():
    gpu = vllm_h100(shape("llama-3-8b"))
    assert gpu.holds(int(gpu.tokens * 1.04)) and not gpu.holds(int(gpu.tokens * 1.06))
    cpu = memory.bytes_budget(268_435_456, 4096, 128)
    assert cpu.holds(65_536) and not cpu.holds(65_537)
