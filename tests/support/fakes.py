"""Launch contexts built by hand: an installed vLLM with chosen flags, a CPU or an H100, a model."""

from pathlib import Path

from serving.machine import FlagInfo, Gpu, Hardware, InstalledVllm
from serving.model.info import ModelInfo
from serving.server_flags import LaunchContext

CPU = Hardware(device="cpu", cpu_model="test", cpu_cores=2, ram_gib=24)
H100 = Hardware(device="cuda", cpu_model="test", cpu_cores=16, ram_gib=128, gpus=(Gpu("NVIDIA H100 80GB HBM3", 79.6),))
MODEL = ModelInfo(
    path=Path("/m"),
    architecture="LlamaForCausalLM",
    max_position_embeddings=8192,
    num_layers=4,
    num_kv_heads=4,
    head_dim=64,
    config_dtype="float32",
    has_weights=True,
    built_here=True,
)

COMMON = [
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--max-model-len",
    "--block-size",
    "--enable-chunked-prefill",
    "--no-enable-chunked-prefill",
    "--enable-prefix-caching",
    "--no-enable-prefix-caching",
    "--long-prefill-token-threshold",
    "--gpu-memory-utilization",
    "--kv-cache-memory-bytes",
    "--dtype",
    "--enforce-eager",
    "--watermark",
    "--prefill-schedule-interval",
]


def installed(version: str, extra=(), missing=()) -> InstalledVllm:
    flags = {}
    for opt in [*COMMON, *extra]:
        if opt not in missing:
            flags[opt] = FlagInfo((opt,), opt[2:].replace("-", "_"), None, None, None, False)
    return InstalledVllm(dist="vllm", version=version, flags=flags)


def ctx(version="0.32.0", hw=CPU, budget=2**30, **kw) -> LaunchContext:
    return LaunchContext(
        installed=installed(version, **kw), hardware=hw, model=MODEL, cpu_kv_budget_bytes=budget, dtype="float32"
    )
