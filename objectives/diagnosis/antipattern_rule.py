"""The anatomy of an anti-pattern rule: what a rule sees (`Subject`: one configuration, its
workload, the serving facts and, for a measured trial, its metrics, with the sizes the rules
compare derived once), what a rule is (`AntipatternRule`: what it rests on, when it holds, what it
says and whether the concern still holds on vLLM V1) and what it gives (`Finding`). Its own module
because the rules in `antipatterns` and the `Diagnosis` that carries their findings both build on
these types, and neither needs the other's rules to do so."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any, Literal

from loadgen import WorkloadSpec
from objectives.diagnosis.facts import (
    ServingFacts,
    effective_max_num_seqs,
    known,
    longest_prompt_tokens,
    mean_request_tokens,
    num,
)

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    """One anti-pattern in a configuration."""

    code: str
    severity: Severity
    message: str
    source: str  # what the rule rests on: vLLM's own behaviour or a tuning practice, in words
    applies_to_v1: str  # whether and how the concern holds on vLLM V1

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class Subject:
    """What the rules look at: one configuration (canonical parameter names, as in scenarios), its
    workload, the serving facts, and the metrics of the trial that ran it (None: not measured)."""

    config: dict[str, Any]
    workload: WorkloadSpec | None
    facts: ServingFacts
    metrics: dict[str, Any] | None = None

    @cached_property
    def longest_request(self) -> int | None:
        return self.workload.longest_request_tokens() if self.workload is not None else None

    @cached_property
    def longest_prompt(self) -> int | None:
        return longest_prompt_tokens(self.workload) if self.workload is not None else None

    @property
    def max_model_len(self) -> int | None:
        return self.config.get("max_model_len") or self.facts.model_max_len

    @property
    def max_num_seqs(self) -> int | None:
        return self.config.get("max_num_seqs")

    @property
    def max_num_batched_tokens(self) -> int | None:
        return self.config.get("max_num_batched_tokens")

    @property
    def memory_utilization(self) -> float | None:
        return self.config.get("memory_utilization")

    @property
    def closed_loop_users(self) -> int | None:
        """The workload's users where it is a closed loop (its arrival has them exactly then)."""
        arrival = self.workload.arrival if self.workload is not None else None
        return arrival.concurrency if arrival is not None and arrival.mode == "closed" else None

    @property
    def chunked_prefill(self) -> bool:
        return self.config.get("enable_chunked_prefill", True) is not False

    @cached_property
    def concurrency(self) -> tuple[float | None, str]:
        """(how many requests were or can be in flight at once, and how we know), or (None, "")."""
        if self.metrics is not None and known(num(self.metrics, "server_running_peak")):
            need = num(self.metrics, "server_running_peak") + max(num(self.metrics, "server_waiting_peak"), 0)
            return need, "measured peak running + waiting"
        if (users := self.closed_loop_users) is not None:
            return float(users), "the workload's closed-loop users"
        return None, ""

    @cached_property
    def cpu_kv_cache(self) -> tuple[float, float | None, int | None] | None:
        """(KV cache tokens, mean request tokens, batch width) on the CPU build; None where unknown."""
        f, util = self.facts, self.memory_utilization
        if (
            util is None
            or f.is_gpu is not False
            or not f.cpu_kv_budget_bytes
            or not f.kv_bytes_per_token
            or self.workload is None
        ):
            return None
        width = effective_max_num_seqs(self.config, f)
        if (users := self.closed_loop_users) is not None and width:
            width = min(width, users)
        return util * f.cpu_kv_budget_bytes / f.kv_bytes_per_token, mean_request_tokens(self.workload), width


Text = Callable[[Subject], str]


@dataclass(frozen=True)
class AntipatternRule:
    code: str
    severity: Severity
    source: str  # what the rule rests on, in words a user can check: vLLM's behaviour or the practice
    holds: Callable[[Subject], bool]
    message: Text
    applies_to_v1: str | Text  # whether and how the concern holds on vLLM V1

    def finding(self, s: Subject) -> Finding:
        applies = self.applies_to_v1 if isinstance(self.applies_to_v1, str) else self.applies_to_v1(s)
        return Finding(self.code, self.severity, self.message(s), self.source, applies)
