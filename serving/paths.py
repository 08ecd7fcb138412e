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
