"""What a configuration needs in device memory, worked out before anything starts.

Pure arithmetic on a model's config.json (`ModelShape`) and one device:

    GPU: total x memory_utilization - weights/TP - outside torch - activations - CUDA graphs
    CPU: the bytes --kv-cache-memory-bytes gives (memory_utilization x the tuner's KV budget)

is the KV cache of one device; divided by the KV bytes per token on that device (K and V of every
layer, in the KV cache dtype, the KV heads split by TP) and rounded down to whole blocks as vLLM
allocates them, it is the KV cache tokens vLLM will log (`GPU KV cache size: N tokens`); every
started trial is checked against that line (`serving.checks`).

The GPU terms follow vLLM 0.32's profiling (`determine_available_memory`, vllm/v1/worker/gpu_worker.py):
of `total x utilization` it keeps for the KV cache what the weights, the memory allocated outside
torch, the peak of a dummy forward pass and the CUDA graphs leave.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIB = 1 << 30
MIB = 1 << 20

# Bytes per element of the dtype names vLLM takes for --dtype and config.json's torch_dtype.
DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}
# KV cache dtypes stored one value per element, without per-head scales or sub-byte packing: the
# only ones whose size this arithmetic knows exactly (`auto` is the serving dtype).
CACHE_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1}

# Calibrated on vLLM's own log for Llama-3-8B bf16 on one H100 at its defaults (8192 batched
# tokens, 1024 sequences): "Total non KV cache memory: 16.51GiB; torch peak memory increase:
# 1.21GiB; weights memory: 14.99GiB" and "Estimated CUDA graph memory: 0.84 GiB".
# Allocations outside torch's allocator (CUDA context, cuBLAS workspaces): 16.51 - 14.99 - 1.21.
OUTSIDE_TORCH_BYTES = int(0.3 * GIB)
# Piecewise CUDA graphs are captured per layer at every capture size: 0.84 GiB over 32 layers.
GRAPH_BYTES_PER_LAYER = int(0.84 * GIB / 32)
# The sampler's logits are float32, one row per sequence.
LOGIT_BYTES = 4
# How far a GPU estimate may be off (it lands within 3% of vLLM's figures for Llama-3-8B): a
# configuration is rejected only when it misses by more, so the arithmetic never costs a trial
# that would have started.
GPU_TOLERANCE = 0.05

# Methods that quantize a full-precision checkpoint while loading it, in bits per weight
# (bitsandbytes: 4-bit blocks of 64 weights with a float32 absmax each).
ON_THE_FLY_BITS = {"fp8": 8.0, "ptpc_fp8": 8.0, "bitsandbytes": 4.5}
# Methods that load only a checkpoint quantized beforehand (a quantization_config says how).
NEEDS_QUANTIZED_CHECKPOINT = frozenset(
    {
        "awq",
        "awq_marlin",
        "gptq",
        "gptq_marlin",
        "gptq_bitblas",
        "marlin",
        "compressed-tensors",
        "modelopt",
        "modelopt_fp4",
        "gguf",
    }
)
# Where a checkpoint's quantization is written when config.json does not hold it, and the method
# a file without `quant_method` means (AutoGPTQ's quantize_config.json, AutoAWQ's quant_config.json).
QUANT_CONFIG_FILES = {"quantize_config.json": "gptq", "quant_config.json": "awq", "hf_quant_config.json": "modelopt"}
# Config keys of architectures whose weights or KV cache this arithmetic does not model.
_UNMODELLED = {
    "num_local_experts": "mixture-of-experts layers",
    "num_experts": "mixture-of-experts layers",
    "n_routed_experts": "mixture-of-experts layers",
    "kv_lora_rank": "latent (MLA) attention",
    "vision_config": "a vision encoder",
}


class ShapeUnknown(ValueError):
    """config.json lacks what the arithmetic needs (not a decoder with Llama's key names)."""


@dataclass(frozen=True)
class Quantization:
    """A checkpoint's weight quantization: its method and bits per quantized weight, group scales
    included (None: a format this arithmetic does not size). Only the decoder layers' linear
    weights are quantized; embeddings and lm_head keep the serving dtype."""

    method: str
    bits: float | None


def quantization_from_config(q: dict[str, Any], method: str | None = None) -> Quantization:
    method = str(q.get("quant_method") or method or "").lower()
    bits = q.get("bits") or q.get("w_bit") or q.get("num_bits")
    group = q.get("group_size") or q.get("q_group_size")
    if method in ("fp8", "fbgemm_fp8"):
        return Quantization(method, 8.0)
    if method == "bitsandbytes":
        return Quantization(method, 4.5 if q.get("load_in_4bit") else 8.0)
    if method == "modelopt":
        algo = str((q.get("quantization") or q).get("quant_algo", "")).upper()
        return Quantization(
            method, 8.0 if algo == "FP8" else 4.5 if algo == "NVFP4" else None
        )  # NVFP4: fp8 scale per 16
    if method == "mxfp4":
        return Quantization(method, 4.25)  # an 8-bit scale per 32 weights
    if method == "compressed-tensors":
        groups = [g.get("weights") or {} for g in (q.get("config_groups") or {}).values()]
        if groups and groups[0].get("num_bits"):
            bits, group = groups[0]["num_bits"], groups[0].get("group_size")
    if not bits:
        return Quantization(method, None)
    # AWQ/GPTQ-style groups: a 16-bit scale and a packed zero point per `group` weights.
    overhead = (16 + float(bits)) / group if group and group > 0 else 0.0
    return Quantization(method, float(bits) + overhead)


@dataclass(frozen=True)
class ModelShape:
    """The sizes config.json gives a dense decoder: enough for its weights, its KV cache and the
    activations of a forward pass."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    qkv_bias: bool
    dtype: str  # the checkpoint's torch_dtype
    quantization: Quantization | None = None  # the checkpoint's own
    unmodelled: str = ""  # what the arithmetic leaves out (experts, MLA, a vision encoder): no weights estimate

    @classmethod
    def from_config(cls, cfg: dict[str, Any], quant: Quantization | None = None) -> ModelShape:
        text = cfg.get("text_config", cfg)
        need = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
        missing = [k for k in need if not text.get(k)]
        if missing:
            raise ShapeUnknown(f"config.json has no {', '.join(missing)}")
        heads = int(text["num_attention_heads"])
        hidden = int(text["hidden_size"])
        q = cfg.get("quantization_config") or text.get("quantization_config")
        return cls(
            layers=int(text["num_hidden_layers"]),
            hidden=hidden,
            heads=heads,
            kv_heads=int(text.get("num_key_value_heads") or heads),
            head_dim=int(text.get("head_dim") or hidden // heads),
            intermediate=int(text["intermediate_size"]),
            vocab=int(text["vocab_size"]),
            tied_embeddings=bool(cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
            # Qwen2 has q/k/v biases without a config key saying so.
            qkv_bias=bool(text.get("attention_bias")) or text.get("model_type") == "qwen2",
            dtype=str(cfg.get("torch_dtype") or text.get("torch_dtype") or cfg.get("dtype") or "bfloat16"),
            quantization=quantization_from_config(q) if q else quant,
            unmodelled=next((what for key, what in _UNMODELLED.items() if cfg.get(key) or text.get(key)), ""),
        )

    @property
    def linear_parameters(self) -> int:
        """The decoder layers' linear weights: q, k, v, o and the gated MLP's gate, up and down."""
        attention = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        return self.layers * (attention + 3 * self.hidden * self.intermediate)

    @property
    def parameters(self) -> int:
        bias = (self.heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0
        norms = 2 * self.hidden
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.linear_parameters + self.layers * (bias + norms) + embeddings + self.hidden

    def weight_bytes(self, dtype: str, quantization: str | None = None) -> int | None:
        """The weights in memory served in `dtype`, quantized as the checkpoint is or, for a
        full-precision checkpoint, as `--quantization` quantizes it while loading (None: a method
        or architecture this arithmetic does not size)."""
        if self.unmodelled or dtype not in DTYPE_BYTES:
            return None
        quant = self.quantization
        if quant is None and quantization is not None:
            if quantization not in ON_THE_FLY_BITS:
                return None
            quant = Quantization(quantization, ON_THE_FLY_BITS[quantization])
        full = self.parameters * DTYPE_BYTES[dtype]
        if quant is None:
            return full
        if quant.bits is None:
            return None
        return int(full - self.linear_parameters * (DTYPE_BYTES[dtype] - quant.bits / 8))


def read_shape(model_dir: str | Path) -> ModelShape | None:
    """The model's shape from its config.json (and a separate quantization file where the
    checkpoint has one); None where config.json does not describe a decoder this arithmetic knows."""
    path = Path(model_dir)
    try:
        cfg = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None
    quant = None
    for name, method in QUANT_CONFIG_FILES.items():
        if (path / name).is_file():
            try:
                quant = quantization_from_config(json.loads((path / name).read_text()), method)
            except ValueError:
                pass
            break
    try:
        return ModelShape.from_config(cfg, quant)
    except ShapeUnknown:
        return None


def serving_dtype(config_dtype: str, dtype: str | None) -> str:
    """The dtype vLLM serves in: --dtype as given, or for `auto` (and unset) the checkpoint's, a
    float32 checkpoint served in bfloat16 (vLLM's rule for `auto`)."""
    if dtype and dtype != "auto":
        return {"float": "float32", "half": "float16"}.get(dtype, dtype)
    config = config_dtype.replace("torch.", "")
    return "bfloat16" if config in ("float32", "float") else config


def cache_bytes(kv_cache_dtype: str | None, dtype: str) -> int | None:
    """Bytes per cached K or V element: the serving dtype's for `auto`; None for a format whose
    layout (sub-byte packing, per-token scales) this arithmetic does not model."""
    if kv_cache_dtype in (None, "auto"):
        return DTYPE_BYTES.get(dtype)
    return CACHE_DTYPE_BYTES.get(kv_cache_dtype)


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, element_bytes: int, tp: int = 1) -> int:
    """K and V of every layer for one token on one device; TP splits the KV heads (a head is
    replicated where there are fewer heads than devices)."""
    return 2 * layers * max(1, kv_heads // tp) * head_dim * element_bytes


def activation_bytes(shape: ModelShape, batched_tokens: int, seqs: int, dtype: str, tp: int = 1) -> int:
    """The peak of vLLM's profiling run: a forward pass over `batched_tokens` tokens (per token the
    residual and the normed hidden state, the MLP's gate/up output and its activation, the MLP
    split by TP), and the sampler over `seqs` rows of float32 logits."""
    per_token = (2 * shape.hidden + 3 * shape.intermediate // tp) * DTYPE_BYTES[dtype]
    return batched_tokens * per_token + seqs * shape.vocab * LOGIT_BYTES


@dataclass(frozen=True)
class KvBudget:
    """One device's KV cache for a configuration, and what it was worked out from."""

    tokens: int  # whole blocks, as vLLM logs them
    kv_bytes: int  # may be negative on a GPU: the rest did not leave any
    bytes_per_token: int
    taken: tuple[tuple[str, int], ...] = ()  # GPU: what came off the requested memory first
    device_bytes: int = 0  # GPU: one GPU's memory
    utilization: float = 0.0
    tolerance: float = 0.0  # how far off the estimate may be (GPU_TOLERANCE on a GPU, exact on the CPU)

    def holds(self, tokens: int) -> bool:
        """Whether `tokens` fit, allowing for the estimate's error."""
        return tokens <= self.tokens * (1 + self.tolerance)

    def explain(self) -> str:
        per_token = f"{self.bytes_per_token:,} bytes per token"
        if not self.device_bytes:
            return (
                f"--kv-cache-memory-bytes {self.kv_bytes:,} ({self.kv_bytes / MIB:.0f} MiB) at {per_token} "
                f"= {self.tokens:,} tokens"
            )
        taken = ", ".join(f"{what} {size / GIB:.2f} GiB" for what, size in self.taken)
        left = (
            f"{self.kv_bytes / GIB:.2f} GiB of KV cache at {per_token} = {self.tokens:,} tokens"
            if self.kv_bytes > 0
            else f"{-self.kv_bytes / GIB:.2f} GiB short, no KV cache"
        )
        return (
            f"{self.utilization:.2f} x {self.device_bytes / GIB:.1f} GiB = "
            f"{self.device_bytes * self.utilization / GIB:.2f} GiB per GPU, less {taken}: {left}"
        )


def whole_blocks(kv_bytes: int, bytes_per_token: int, block_size: int) -> int:
    """The tokens vLLM makes of `kv_bytes`: whole blocks of `block_size` tokens (every layer's)."""
    return max(0, kv_bytes // (bytes_per_token * block_size) * block_size)


def bytes_budget(kv_bytes: int, bytes_per_token: int, block_size: int) -> KvBudget:
    """A KV cache given in bytes (--kv-cache-memory-bytes: the CPU build always, a GPU where the
    scenario fixes it): exact."""
    return KvBudget(whole_blocks(kv_bytes, bytes_per_token, block_size), kv_bytes, bytes_per_token)


@dataclass(frozen=True)
class GpuServing:
    """What decides a server's memory on one of its GPUs: the device's memory and the share vLLM
    may take of it (`utilization`), the serving dtype and the KV cache's element size, the KV
    block, the profiling run's batch (`batched_tokens` over `seqs` sequences), CUDA graphs, the
    tensor-parallel size and the quantization method."""

    device_bytes: int
    utilization: float
    dtype: str
    element_bytes: int
    block_size: int
    batched_tokens: int
    seqs: int
    cuda_graphs: bool
    tp: int = 1
    quantization: str | None = None


def gpu_budget(shape: ModelShape, gpu: GpuServing) -> KvBudget | None:
    """One GPU's KV cache as vLLM's profiling will size it (None: weights this arithmetic cannot
    size). Each of the TP GPUs holds 1/TP of the weights and of the KV heads."""
    weights = shape.weight_bytes(gpu.dtype, gpu.quantization)
    if weights is None:
        return None
    requested = int(gpu.device_bytes * gpu.utilization)
    taken: tuple[tuple[str, int], ...] = (
        ("weights", weights // gpu.tp),
        ("outside torch", OUTSIDE_TORCH_BYTES),
        ("activations", activation_bytes(shape, gpu.batched_tokens, gpu.seqs, gpu.dtype, gpu.tp)),
        ("CUDA graphs", GRAPH_BYTES_PER_LAYER * shape.layers if gpu.cuda_graphs else 0),
    )
    taken = tuple((what, size) for what, size in taken if size)
    kv = requested - sum(size for _, size in taken)
    per_token = kv_bytes_per_token(shape.layers, shape.kv_heads, shape.head_dim, gpu.element_bytes, gpu.tp)
    return KvBudget(
        whole_blocks(kv, per_token, gpu.block_size),
        kv,
        per_token,
        taken,
        gpu.device_bytes,
        gpu.utilization,
        GPU_TOLERANCE,
    )
