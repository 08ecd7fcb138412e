"""What the checks know about the installed vLLM and the machine, handed in by the caller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class ServingFacts:
    """What the checks need to know about the installed vLLM and the machine (None: unknown)."""

    accepts: Callable[[str], bool] | None = None  # does the installed vLLM take this flag?
    is_gpu: bool | None = None
    vllm_label: str = "the installed vLLM"
    model_max_len: int | None = None
    kv_bytes_per_token: int | None = None
    cpu_kv_budget_bytes: int | None = None  # what memory_utilization 1.0 means on the CPU build
    default_max_num_seqs: int | None = None

    @classmethod
    def from_context(cls, ctx: Any) -> "ServingFacts":
        """From a `search.serving.registry.LaunchContext` (duck-typed: objectives does not import search)."""
        gpu = ctx.hardware.is_gpu
        mem = ctx.hardware.gpus[0].memory_gib if gpu and ctx.hardware.gpus else 0
        # vLLM's serve defaults (EngineArgs.get_batch_defaults; reference/vllm.md section 3).
        default_mns = 128 if not gpu else (1024 if mem >= 70 and "A100" not in ctx.hardware.gpus[0].name
                                           else 256)
        return cls(accepts=ctx.installed.accepts, is_gpu=gpu, vllm_label=ctx.installed.label(),
                   model_max_len=ctx.model.max_position_embeddings,
                   kv_bytes_per_token=ctx.model.kv_bytes_per_token(ctx.dtype),
                   cpu_kv_budget_bytes=ctx.cpu_kv_budget_bytes, default_max_num_seqs=default_mns)

    def has_flag(self, flag: str) -> bool:
        """Unknown installs are taken as current V1 (0.32): the seeds' removed flags are gone."""
        if self.accepts is not None:
            return self.accepts(flag)
        return flag not in ("--scheduler-delay-factor", "--swap-space")



def effective_max_num_seqs(config: dict[str, Any], facts: ServingFacts) -> int | None:
    mns = config.get("max_num_seqs") or facts.default_max_num_seqs
    active = config.get("max_num_active_seqs")
    if mns and active:
        return min(int(mns), int(active))
    return int(mns) if mns else (int(active) if active else None)

