"""Warm-ups that cannot matter for the model a tuner's server serves, skipped; and the seconds of
the unstamped steps after CUDA graph capture, said, so that a start's anatomy can tell them apart.

- The ll_bf16 router GEMM warm-up (vLLM 0.26, `kernel_warmup._warmup_ll_bf16_router_gemm()`,
  no argument): it JIT-compiles the CuTeDSL kernels of the MoE routers of four fixed model shapes
  on every Hopper or newer GPU, whatever model is served (15 s of a warm H100 start of a dense
  Llama, 20 s of a cold one: docs/gpu.md). Skipped where the served model has no MoE layer or
  router gate. Later vLLM releases take the model and skip it themselves (`(model)`): left alone.
- The pre-trigger of inductor's lazy init after capture (`trigger_inductor_lazy_init`): it
  registers inductor's pattern-matcher passes so that a compile *while serving* does not run
  them under vLLM's GPU sync check (VLLM_GPU_SYNC_CHECK). A tuner's server compiles nothing
  while serving (every compile range is compiled, or loaded from the cache, during the start),
  and without the sync check such a compile would run the same init itself; so where the check
  is off it is skipped, and where it is on it runs, timed.
"""

from __future__ import annotations

import inspect
import os
import sys
import time
from collections.abc import Callable
from types import ModuleType

from . import hooks

KERNEL_WARMUP = "vllm.model_executor.warmup.kernel_warmup"
COMPILER_INTERFACE = "vllm.compilation.compiler_interface"
GPU_WORKER = "vllm.v1.worker.gpu_worker"
ROUTER_WARMUP = "_warmup_ll_bf16_router_gemm"
LAZY_INIT = "trigger_inductor_lazy_init"
SAMPLER_WARMUP = "warmup_kernels"
# Class names of the layers that route tokens to experts (vLLM's FusedMoE and its router gate,
# and the model-specific MoE blocks that wrap them).
MOE_LAYERS = ("FusedMoE", "GateLinear", "SharedFusedMoE")


def has_moe(model) -> bool:
    return any(type(m).__name__ in MOE_LAYERS or "MoE" in type(m).__name__ for m in model.modules())


def _served_model(frame) -> object | None:
    """The model of the worker whose `kernel_warmup(worker)` called the router warm-up."""
    worker = frame.f_locals.get("worker") if frame is not None else None
    get_model = getattr(worker, "get_model", None)
    try:
        return get_model() if callable(get_model) else None
    except Exception:  # a worker without its model yet: keep the warm-up
        return None


def patch_router_warmup(module: ModuleType, say: Callable[[str], None]) -> None:
    original = getattr(module, ROUTER_WARMUP, None)
    if not callable(original):
        say(f"no {ROUTER_WARMUP} in this vLLM: nothing to skip")
        return
    if inspect.signature(original).parameters:
        say(f"{ROUTER_WARMUP} takes the model in this vLLM, which skips it for a dense one itself: left alone")
        return

    def router_warmup_for_moe_models_only() -> None:
        model = _served_model(sys._getframe(1))
        if model is None or has_moe(model):
            say("ll_bf16 router GEMM warm-up kept: the model has MoE layers, or its worker was not found")
            original()
            return
        say(f"ll_bf16 router GEMM warm-up skipped: {type(model).__name__} has no MoE layer or router gate")

    setattr(module, ROUTER_WARMUP, router_warmup_for_moe_models_only)


def patch_lazy_init(module: ModuleType, say: Callable[[str], None]) -> None:
    original = getattr(module, LAZY_INIT, None)
    if not callable(original):
        say(f"no {LAZY_INIT} in this vLLM: nothing to skip")
        return

    def lazy_init_only_under_the_sync_check(*args, **kwargs):
        if not os.environ.get("VLLM_GPU_SYNC_CHECK"):
            say("inductor lazy-init pre-trigger skipped: nothing compiles while serving, and no GPU sync check is on")
            return None
        t0 = time.monotonic()
        try:
            return original(*args, **kwargs)
        finally:
            say(f"inductor lazy-init pre-trigger (VLLM_GPU_SYNC_CHECK is on) took {time.monotonic() - t0:.1f} s")

    setattr(module, LAZY_INIT, lazy_init_only_under_the_sync_check)


def time_sampler_warmup(module: ModuleType, say: Callable[[str], None]) -> None:
    """The V2 model runner's execute-and-sample run after capture, timed (its line is unstamped)."""
    original = getattr(module, SAMPLER_WARMUP, None)
    if not callable(original):
        return

    def timed_warmup_kernels(*args, **kwargs):
        t0 = time.monotonic()
        try:
            return original(*args, **kwargs)
        finally:
            say(f"the model runner's JIT warm-up run after capture took {time.monotonic() - t0:.1f} s")

    setattr(module, SAMPLER_WARMUP, timed_warmup_kernels)


def install(say: Callable[[str], None]) -> None:
    hooks.when_imported(KERNEL_WARMUP, lambda m: patch_router_warmup(m, say))
    hooks.when_imported(COMPILER_INTERFACE, lambda m: patch_lazy_init(m, say))
    hooks.when_imported(GPU_WORKER, lambda m: time_sampler_warmup(m, say))
