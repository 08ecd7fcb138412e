"""Where the tuner keeps things that outlive one process (all outside git)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """Models, compile caches and the vLLM flag cache. `AUTOTUNE_CACHE_DIR` overrides."""
    env = os.environ.get("AUTOTUNE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "vllm-autotune"


def vllm_cache_root() -> Path:
    """Persisted `VLLM_CACHE_ROOT` so compiled graphs survive between trials and studies."""
    return cache_root() / "vllm"


def server_cache_env() -> dict[str, str]:
    """Where a server keeps what it compiles or JIT-compiles: under the tuner's cache, so that it
    outlives a start and a study (and, carried by benchmarks/gpu/, a GPU lease). vLLM's own cache
    holds torch.compile's graphs and FlashInfer's autotune results; FlashInfer's JIT modules,
    Triton's kernels and the driver's PTX cache would otherwise go under $HOME. The variable a
    user set is kept."""
    root = cache_root()
    return {
        "VLLM_CACHE_ROOT": str(vllm_cache_root()),
        "FLASHINFER_WORKSPACE_BASE": str(root / "flashinfer"),
        "TRITON_CACHE_DIR": str(root / "triton"),
        "CUDA_CACHE_PATH": str(root / "cuda"),
    }
