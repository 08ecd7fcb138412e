"""Launch contexts on the published model shapes of configs/models/ (no weights, no GPU): an H100
host with any number of GPUs, or the CPU, with the GPU knobs' flags installed."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from serving.machine import Gpu, Hardware
from serving.model.info import ModelInfo
from serving.model.memory import ModelShape
from serving.server_flags import LaunchContext
from tests.support.fakes import CPU, H100, installed
from tests.support.paths import REPO

MODELS = REPO / "configs" / "models"
GPU_FLAGS = [
    "--tensor-parallel-size",
    "--quantization",
    "--kv-cache-dtype",
    "--no-enforce-eager",
    "--optimization-level",
    "--max-cudagraph-capture-size",
    "--async-scheduling",
    "--no-async-scheduling",
    "--performance-mode",
]


def config(name: str) -> dict:
    return json.loads((MODELS / f"{name}.json").read_text())


def model_info(cfg: dict, path: Path = MODELS) -> ModelInfo:
    heads = cfg["num_attention_heads"]
    return ModelInfo(
        path=path,
        architecture=cfg["architectures"][0],
        max_position_embeddings=cfg["max_position_embeddings"],
        num_layers=cfg["num_hidden_layers"],
        num_kv_heads=cfg.get("num_key_value_heads", heads),
        head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
        config_dtype=cfg.get("torch_dtype", "bfloat16"),
        has_weights=False,
        built_here=False,
    )


def h100s(n: int) -> Hardware:
    return replace(H100, gpus=(Gpu("NVIDIA H100 80GB HBM3", 79.6),) * n)


def model_ctx(
    name: str = "llama-3-8b",
    hw: Hardware = H100,
    cfg: dict | None = None,
    version: str = "0.32.0",
    extra=(),
    budget: int = 2**30,
    dtype: str | None = None,
) -> LaunchContext:
    cfg = cfg or config(name)
    # configs/models/ has no weights: its servers get --load-format dummy
    return LaunchContext(
        installed=installed(version, extra=[*GPU_FLAGS, "--load-format", *extra]),
        hardware=hw,
        model=model_info(cfg),
        cpu_kv_budget_bytes=budget,
        dtype=dtype,
        shape=ModelShape.from_config(cfg),
    )


__all__ = ["CPU", "H100", "config", "h100s", "model_ctx", "model_info"]
