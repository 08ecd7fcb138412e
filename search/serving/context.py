"""Assembles the facts a launch depends on: installed vLLM, hardware, model, memory budget."""

from __future__ import annotations

import os
from pathlib import Path

import psutil

from search.serving import hardware, local_model, memory, model_info
from search.serving.registry import LaunchContext
from search.serving.vllm_flags import load_installed

# What memory_utilization = 1.0 means on the CPU build (see README, "Memory on the CPU build").
DEFAULT_CPU_KV_BUDGET_GIB = 1.0


def cpu_kv_budget_bytes(gib: float | None = None) -> int:
    gib = gib if gib is not None else float(os.environ.get("AUTOTUNE_CPU_KV_BUDGET_GIB",
                                                           DEFAULT_CPU_KV_BUDGET_GIB))
    # Never promise more than half of what is free now: the client and the OS need the rest.
    available = psutil.virtual_memory().available
    return int(min(gib * 2**30, available / 2))


def resolve_model(model: str | Path | None) -> Path:
    if model:
        return Path(model).expanduser().resolve()
    return local_model.build()


def serving_dtype(hw: hardware.Hardware, info: model_info.ModelInfo) -> str | None:
    """fp32 on CPUs without fast bf16: vLLM's `auto` turns fp32 into bf16, ~37x slower there."""
    if hw.is_gpu or hw.cpu_has_fast_bf16:
        return None
    return "float32"


def launch_context(model: str | Path | None = None, kv_budget_gib: float | None = None) -> LaunchContext:
    hw = hardware.detect()
    info = model_info.read(resolve_model(model))
    return LaunchContext(
        installed=load_installed(),
        hardware=hw,
        model=info,
        cpu_kv_budget_bytes=cpu_kv_budget_bytes(kv_budget_gib),
        dtype=serving_dtype(hw, info),
        shape=memory.read_shape(info.path),
    )
