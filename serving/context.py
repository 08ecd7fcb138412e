"""Assembles the facts a launch depends on: installed vLLM, hardware, model, memory budget."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import psutil

from serving import machine
from serving.machine import InstalledVllm, check_supported, load_installed
from serving.model import hub, memory
from serving.model import info as model_info
from serving.model import local as local_model
from serving.server_flags import LaunchContext

# What memory_utilization = 1.0 means on the CPU build (docs/serving.md, "Memory on the CPU build").
DEFAULT_CPU_KV_BUDGET_GIB = 1.0


def cpu_kv_budget_bytes(gib: float | None = None) -> int:
    gib = gib if gib is not None else float(os.environ.get("AUTOTUNE_CPU_KV_BUDGET_GIB", DEFAULT_CPU_KV_BUDGET_GIB))
    # Never promise more than half of what is free now: the client and the OS need the rest.
    available = psutil.virtual_memory().available
    return int(min(gib * 2**30, available / 2))


def resolve_model(model: str | Path | None, *, allow_download: bool = False) -> model_info.ModelInfo:
    """The model a launch serves: the built-in one (built on first use), a local directory, or a
    hub id (`org/name[@revision]`) found in the Hugging Face cache, or fetched into it when
    `allow_download`. Raises ModelError."""
    if not model:
        if not local_model.is_built(local_model.default_model_dir()):
            print("autotune: building the built-in model, once (about a minute)", file=sys.stderr)
        return model_info.read(local_model.build())
    ref = hub.parse(model)
    if isinstance(ref, Path):
        return model_info.read(ref.resolve())
    snapshot = hub.snapshot(ref, allow_download=allow_download)
    return replace(model_info.read(snapshot.path), repo_id=ref.repo_id, revision=snapshot.commit)


def supported_vllm() -> InstalledVllm:
    """The installed vLLM's flags, once it is known to be one the tuner supports. Raises
    VllmNotInstalled (VllmTooOld for an old one) in one line."""
    found = machine.installed_vllm()
    if found is not None:
        check_supported(*found)
    return load_installed()


def serving_dtype(hw: machine.Hardware, info: model_info.ModelInfo) -> str | None:
    """fp32 on CPUs without fast bf16: vLLM's `auto` turns fp32 into bf16, ~37x slower there."""
    if hw.is_gpu or hw.cpu_has_fast_bf16:
        return None
    return "float32"


def launch_context(model: str | Path | None = None, kv_budget_gib: float | None = None) -> LaunchContext:
    installed = supported_vllm()
    hw = machine.detect()
    info = resolve_model(model, allow_download=hub.downloads_allowed())
    return LaunchContext(
        installed=installed,
        hardware=hw,
        model=info,
        cpu_kv_budget_bytes=cpu_kv_budget_bytes(kv_budget_gib),
        dtype=serving_dtype(hw, info),
        shape=memory.read_shape(info.path),
    )
