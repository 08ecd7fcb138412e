"""A configuration checked against vLLM: before any server starts, what is rejected
(configurations vLLM is known to refuse, a tensor parallel size the devices or the model's heads
do not allow, a quantization the checkpoint contradicts, and a KV cache that cannot hold one
request: `memory_budget`, by `serving.model.memory`'s arithmetic); once one started, that same
KV cache against the one vLLM logged (`kv_cache_check_at_start`).

vLLM logs what its profiling left for the KV cache once per engine, in tokens since V1:

    CPU KV cache size: 65,536 tokens, Maximum concurrency for 2,048 tokens per request: 32.00x
    GPU KV cache size: 444,592 tokens            (the concurrency on this line or the next)
    # GPU blocks: 27787, # CPU blocks: 2048      (V0; `# cuda blocks:` in its later releases)

Every started trial stores the predicted tokens, vLLM's and the relative error with its server
diagnostics, so the arithmetic that rejects configurations before a start is checked on every
start that happens.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from serving.defaults import DEFAULT_MEMORY_UTILIZATION, default_batch, default_block_size
from serving.model import memory
from serving.model.memory import GIB, KvBudget
from serving.server_flags import LaunchContext


def _batch(values: dict[str, Any], ctx: LaunchContext, max_model_len: int) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as vLLM will run them: set, or its defaults for this
    hardware (doubled by performance_mode throughput), max_num_seqs capped by the token budget and
    the token budget raised to max_model_len with chunked prefill off."""
    default_mnbt, default_mns = default_batch(ctx.hardware)
    if values.get("performance_mode") == "throughput":
        default_mnbt, default_mns = 2 * default_mnbt, 2 * default_mns
    mnbt = values.get("max_num_batched_tokens")
    mns = values.get("max_num_seqs")
    effective_mns = mns if mns is not None else min(default_mns, mnbt or default_mnbt)
    if mnbt is None:
        mnbt = (
            default_mnbt
            if values.get("enable_chunked_prefill", True) is not False
            else max(max_model_len, default_mnbt)
        )
    return mnbt, effective_mns


def memory_budget(values: dict[str, Any], ctx: LaunchContext) -> KvBudget | None:
    """The KV cache one device will hold for `values` (as applied), by `memory`'s arithmetic. None
    where it cannot be told: the CPU build without memory_utilization (vLLM then sizes the cache
    from the node's RAM), a model or a format the arithmetic does not know."""
    dtype = memory.serving_dtype(ctx.model.config_dtype, values.get("dtype") or ctx.dtype)
    element = memory.cache_bytes(values.get("kv_cache_dtype"), dtype)
    if element is None:
        return None
    block = values.get("block_size") or default_block_size(ctx.hardware)
    m = ctx.model
    per_token = memory.kv_bytes_per_token(m.num_layers, m.num_kv_heads, m.head_dim, element)
    if not ctx.hardware.is_gpu:
        util = values.get("memory_utilization")
        return None if util is None else memory.bytes_budget(ctx.cpu_kv_bytes(util), per_token, block)
    if ctx.shape is None or not ctx.hardware.gpus:
        return None
    tp = values.get("tensor_parallel_size") or 1
    if (fixed := values.get("kv_cache_memory_bytes")) is not None:  # per GPU, as given, unprofiled
        return memory.bytes_budget(
            int(fixed), memory.kv_bytes_per_token(m.num_layers, m.num_kv_heads, m.head_dim, element, tp), block
        )
    mnbt, mns = _batch(values, ctx, values.get("max_model_len") or ctx.model.max_position_embeddings)
    gpu = memory.GpuServing(
        device_bytes=int(ctx.hardware.gpus[0].memory_gib * GIB),
        utilization=values.get("memory_utilization", DEFAULT_MEMORY_UTILIZATION),
        dtype=dtype,
        element_bytes=element,
        block_size=block,
        batched_tokens=mnbt,
        seqs=mns,
        tp=tp,
        cuda_graphs=not values.get("enforce_eager") and values.get("optimization_level") != 0,
        quantization=values.get("quantization"),
    )
    return memory.gpu_budget(ctx.shape, gpu)


# What vLLM logged of the KV cache it allocated, against `memory_budget`'s.
_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
_V0_BLOCKS = re.compile(r"# (?:GPU|cuda) blocks: (\d+)")

PREDICTED = "kv_cache_tokens_predicted"
LOGGED = "kv_cache_tokens_vllm"
ERROR = "kv_cache_tokens_error"  # (predicted - vLLM's) / vLLM's


def logged_kv_tokens(log_text: str, block_size: int) -> int | None:
    """The KV cache tokens vLLM logged (the smallest engine's, where several did), or None."""
    tokens = [int(m.group(1).replace(",", "")) for m in _TOKENS.finditer(log_text)]
    if tokens:
        return min(tokens)
    blocks = [int(m.group(1)) for m in _V0_BLOCKS.finditer(log_text)]
    return min(blocks) * block_size if blocks else None


def kv_cache_check(predicted: int | None, logged: int | None) -> dict[str, float]:
    """The diagnostics a started trial stores: the arithmetic's tokens, vLLM's and the relative
    error, each where known."""
    found: dict[str, float] = {}
    if predicted is not None:
        found[PREDICTED] = predicted
    if logged is not None:
        found[LOGGED] = logged
    if predicted is not None and logged:
        found[ERROR] = (predicted - logged) / logged
    return found


def kv_cache_check_at_start(values: Mapping[str, Any], ctx: LaunchContext, log_path: Path) -> dict[str, float]:
    """`kv_cache_check` for a server that started with `values` (as applied) and logs to `log_path`."""
    budget = memory_budget(dict(values), ctx)
    try:
        text = Path(log_path).read_text(errors="replace")
    except OSError:
        text = ""
    block = values.get("block_size") or default_block_size(ctx.hardware)
    return kv_cache_check(budget.tokens if budget is not None else None, logged_kv_tokens(text, block))


def describe_kv_check(diagnostics: Mapping[str, Any]) -> str:
    """One line for a trial's KV check: '65,536 predicted, 65,536 by vLLM (+0.0%)' ('' if none)."""
    predicted, logged, error = diagnostics.get(PREDICTED), diagnostics.get(LOGGED), diagnostics.get(ERROR)
    parts = [
        f"{predicted:,.0f} predicted" if predicted is not None else "",
        f"{logged:,.0f} by vLLM" if logged is not None else "",
    ]
    text = ", ".join(p for p in parts if p)
    return f"{text} ({error:+.1%})" if error is not None else text


# Methods vLLM lets take over another method's checkpoint (its `override_quantization_method`),
# besides a method's own kernel variants (awq -> awq_marlin, gptq -> gptq_marlin).
_TAKES_OVER = frozenset({"moe_wna16", "inc", "humming", "marlin", "ipex"})


def device_problems(values: dict[str, Any], ctx: LaunchContext) -> list[str]:
    """What the visible devices, the model's config.json or the installed build rule out for the
    GPU knobs: vLLM's own checks at start (ModelConfig, the parallel linear layers, the CPU
    attention backend), run here without starting it."""
    problems: list[str] = []
    hw, shape = ctx.hardware, ctx.shape
    tp = values.get("tensor_parallel_size") or 1
    if tp > 1:
        if tp > len(hw.gpus):
            problems.append(
                f"tensor_parallel_size {tp} needs {tp} GPUs; {len(hw.gpus)} visible ({hw.describe()}; "
                f"CUDA_VISIBLE_DEVICES decides which)"
            )
        if shape is not None and shape.heads % tp:
            problems.append(f"tensor_parallel_size {tp} does not divide the model's {shape.heads} attention heads")
        kv = shape.kv_heads if shape is not None else ctx.model.num_kv_heads
        if (kv % tp) if kv >= tp else (tp % kv):
            problems.append(
                f"tensor_parallel_size {tp} must divide the model's {kv} KV heads, or be a multiple "
                f"of them (each head then replicated)"
            )
        if shape is not None and shape.intermediate % tp:
            problems.append(f"tensor_parallel_size {tp} does not divide the model's MLP width ({shape.intermediate})")
    kv_dtype = values.get("kv_cache_dtype") or "auto"
    if kv_dtype.startswith("fp8") and not hw.is_gpu:
        if not {"avx512f", "amx_tile"} & hw.cpu_flags:
            problems.append(
                f"kv_cache_dtype {kv_dtype} on the CPU build needs AVX-512 or AMX; this CPU "
                f"({hw.cpu_model}) has neither"
            )
        if ctx.model.head_dim % 32:
            problems.append(
                f"kv_cache_dtype {kv_dtype} on the CPU build needs a head size divisible by 32; "
                f"the model's is {ctx.model.head_dim}"
            )
    method = values.get("quantization")
    own = shape.quantization if shape is not None else None
    if (
        method
        and own is not None
        and own.method
        and method != own.method
        and own.method not in method
        and method not in _TAKES_OVER
    ):
        problems.append(
            f"quantization {method} contradicts the checkpoint's quantization_config ({own.method}): "
            f"vLLM refuses the pair"
        )
    if method and shape is not None and own is None and method in memory.NEEDS_QUANTIZED_CHECKPOINT:
        problems.append(
            f"quantization {method} loads only a checkpoint quantized with it; the model's config.json "
            f"has no quantization_config"
        )
    return problems


def check_combination(values: dict[str, Any], ctx: LaunchContext, longest_request: int | None = None) -> list[str]:
    """Known-invalid combinations (vLLM's own startup checks, run here in milliseconds)."""
    problems: list[str] = []
    model_max = ctx.model.max_position_embeddings
    mml = values.get("max_model_len") or model_max
    mnbt = values.get("max_num_batched_tokens")
    mns = values.get("max_num_seqs")
    chunked = values.get("enable_chunked_prefill", True) is not False
    if mml > model_max:
        problems.append(f"max_model_len ({mml}) is greater than the model's max_position_embeddings ({model_max})")
    if mnbt is not None and mns is not None and mnbt < mns:
        problems.append(f"max_num_batched_tokens ({mnbt}) must be >= max_num_seqs ({mns})")
    if not chunked and mnbt is not None and mnbt < mml:
        problems.append(
            f"max_num_batched_tokens ({mnbt}) is smaller than max_model_len ({mml}) "
            "with chunked prefill off: longer prompts could never be scheduled"
        )
    effective_mns = _batch(values, ctx, mml)[1]
    active = values.get("max_num_active_seqs")
    if active is not None and active > effective_mns:
        problems.append(f"max_num_active_seqs ({active}) cannot be greater than max_num_seqs ({effective_mns})")
    lpt = values.get("long_prefill_token_threshold")
    if lpt is not None and lpt > mml:
        problems.append(f"long_prefill_token_threshold ({lpt}) cannot be greater than max_model_len ({mml})")
    if longest_request is not None and longest_request > mml:
        problems.append(
            f"the workload's longest request ({longest_request} tokens, prompt + output) "
            f"does not fit max_model_len ({mml}); vLLM would reject or truncate it"
        )
    problems += device_problems(values, ctx)
    budget = memory_budget(values, ctx)
    if budget is not None and not budget.holds(mml):
        util = values.get("memory_utilization", DEFAULT_MEMORY_UTILIZATION)
        held = f"a KV cache of {budget.tokens:,} tokens" if budget.kv_bytes > 0 else "no memory for the KV cache"
        problems.append(
            f"memory_utilization {util:.2f} leaves {held}, less than one {mml}-token request needs ({budget.explain()})"
        )
    return problems
