"""Which move a trial's bottleneck calls for: the rule table of the diagnosis-led proposer.

Pure: a trial's diagnosis (`objectives.diagnosis.Diagnosis`), the trial's configuration
and its flat metrics in, a `Move` out. Each rule follows the diagnosis' own next steps for its
bottleneck (objectives/diagnosis/causes.py), reduced to knobs the search space can turn:

    queueing, the batch full (running = max_num_seqs)   -> raise max_num_seqs
    queueing, the KV cache full                          -> raise memory_utilization
    queueing, the engine saturated                       -> raise max_num_batched_tokens
    preemption (the KV cache ran full)                   -> raise memory_utilization, else lower max_num_seqs
    prefill_bound (long prompts delay first tokens)      -> set/lower long_prefill_token_threshold,
                                                            else lower max_num_batched_tokens
    decode_bound, decode steps stalled behind prefills   -> lower max_num_batched_tokens, else the threshold
    decode_bound                                         -> lower max_num_seqs

A rule lists its steps in order of preference: the proposer makes the first one the search space
allows (the knob is searched and not at its bound already). Healthy trials, failed ones, client-
bound ones and server errors call for no move: the model-based sampler proposes instead.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from objectives.diagnosis import ITL_STALL_RATIO, KV_FULL, Diagnosis

Direction = Literal["raise", "lower", "enable"]  # enable: a knob that is off (0) gets its mildest setting


@dataclass(frozen=True)
class Step:
    param: str
    direction: Direction
    why: str  # the evidence, in a few words


@dataclass(frozen=True)
class Move:
    """What one trial's bottleneck calls for, stored with the trial (`MOVE_ATTR`)."""

    bottleneck: str
    steps: tuple[Step, ...]
    at: dict[str, Any] = field(default_factory=dict)  # the trial's values of the searched knobs

    def as_dict(self) -> dict[str, Any]:
        return {"bottleneck": self.bottleneck, "steps": [asdict(s) for s in self.steps], "at": self.at}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Move:
        return cls(d["bottleneck"], tuple(Step(**s) for s in d["steps"]), dict(d.get("at") or {}))


def _num(metrics: dict[str, Any], key: str) -> float:
    v = metrics.get(key)
    return float(v) if isinstance(v, (int, float)) and not math.isnan(v) else math.nan


def _queueing(config: dict[str, Any], m: dict[str, Any]) -> tuple[Step, ...]:
    running, mns, kv = _num(m, "server_running_peak"), config.get("max_num_seqs"), _num(m, "server_kv_cache_usage_peak")
    if mns and running >= mns:
        return (Step("max_num_seqs", "raise", f"queue growing, batch full ({running:.0f} running = max_num_seqs)"),)
    if kv >= KV_FULL:
        return (Step("memory_utilization", "raise", f"queue growing, KV cache {kv:.0%} full holds admission back"),)
    return (
        Step("max_num_batched_tokens", "raise", "queue growing, batch not full: the engine is saturated"),
        Step("max_num_seqs", "raise", "queue growing"),
    )


def _preemption(config: dict[str, Any], m: dict[str, Any]) -> tuple[Step, ...]:
    why = f"{_num(m, 'server_preemptions'):.0f} preemptions: KV cache too small"
    return (Step("memory_utilization", "raise", why), Step("max_num_seqs", "lower", why))


def _prefill_bound(config: dict[str, Any], m: dict[str, Any]) -> tuple[Step, ...]:
    why = "long prefills stall first tokens"
    threshold = (
        Step("long_prefill_token_threshold", "lower", why)
        if config.get("long_prefill_token_threshold")
        else Step("long_prefill_token_threshold", "enable", why)
    )
    return threshold, Step("max_num_batched_tokens", "lower", why)


def _decode_bound(config: dict[str, Any], m: dict[str, Any]) -> tuple[Step, ...]:
    itl50, itl99 = _num(m, "itl_median_ms"), _num(m, "itl_p99_ms")
    if itl50 > 0 and itl99 >= ITL_STALL_RATIO * itl50:
        why = f"decode steps stall behind prefill chunks (ITL p99 {itl99 / itl50:.0f}x the median)"
        return (
            Step("max_num_batched_tokens", "lower", why),
            *_prefill_bound(config, m)[:1],
            Step("max_num_seqs", "lower", why),
        )
    return (Step("max_num_seqs", "lower", "slow decode steps: too many sequences per step"),)


RULES = {
    "queueing": _queueing,
    "preemption": _preemption,
    "prefill_bound": _prefill_bound,
    "decode_bound": _decode_bound,
}


def move_for(
    diagnosis: Diagnosis,
    config: dict[str, Any],
    metrics: dict[str, Any],
    searched: tuple[str, ...] | list[str] = (),
    unset: dict[str, Any] | None = None,
) -> Move | None:
    """The move a trial's diagnosis calls for; None when its bottleneck has no rule. `searched`:
    the knobs of the search space, whose values the move starts from (`Move.at`); `unset`: what
    the server runs a searched knob with when the configuration leaves it unset (a baseline's),
    so that a move can start from vLLM's default (turn on a threshold that is off, say)."""
    rule = RULES.get(diagnosis.bottleneck)
    if rule is None:
        return None
    running = {**{k: v for k, v in (unset or {}).items() if v is not None}, **config}
    at = {k: running[k] for k in searched if running.get(k) is not None}
    return Move(diagnosis.bottleneck, rule(running, metrics), at)
