"""What the checks know about the installed vLLM and the machine, handed in by the caller."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ServingFacts:
    """What the checks need to know about the installed vLLM and the machine (None: unknown).

    They come in from the caller, so the checks are pure: `serving_facts` (`facts_from_serving`)
    fills them from serving's flag registry (which parameters vLLM removed, and in which release)
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
