"""Configuration anti-patterns: settings that tuning practice or vLLM itself warns against.

One `AntipatternRule` per finding code, in `RULES`: what the rule rests on, when it holds, what it
says and whether the concern, often written for vLLM's V0 engine, still holds on V1 (a `Finding`
when it holds); what a rule sees is a `Subject` (the rule type, the subject and the finding are in
`antipattern_rule`). `antipatterns()` walks the table in order, so findings come out in table
order. Rules that share a topic (memory_utilization high / no headroom / low) have predicates that
exclude each other, as the branches of one if-chain did."""

from __future__ import annotations

import math
from typing import Any

from loadgen import WorkloadSpec
from objectives.diagnosis.antipattern_rule import AntipatternRule, Finding, Subject
from objectives.diagnosis.facts import ServingFacts, has_shared_prefix
from objectives.diagnosis.thresholds import (
    CONCURRENCY_HEADROOM,
    DELAY_FACTOR_RANGE,
    GPU_MEMORY_UTILIZATION_HEADROOM,
    GPU_MEMORY_UTILIZATION_HIGH,
    GPU_MEMORY_UTILIZATION_LOW,
    MAX_MODEL_LEN_SLACK,
    MAX_NUM_SEQS_HIGH,
    PREFILL_STEPS_MAX,
    SWAP_SPACE_MIN_GIB,
)


def _max_model_len_too_small(s: Subject) -> bool:
    longest, mml = s.longest_request, s.max_model_len
    if not longest or not mml:
        return False
    return longest > mml


def _max_model_len_oversized(s: Subject) -> bool:
    longest, mml = s.longest_request, s.max_model_len
    if not longest or not mml:
        return False
    return longest <= mml and mml > MAX_MODEL_LEN_SLACK * longest


def _max_model_len_oversized_message(s: Subject) -> str:
    longest, mml = s.longest_request, s.max_model_len
    assert longest and mml  # `_max_model_len_oversized` holds: both are known
    return (
        f"max_model_len {mml}{' (the model default)' if not s.config.get('max_model_len') else ''} "
        f"is {mml / longest:.0f}x the workload's longest request ({longest} tokens); "
        f"set it near {longest} (typical: 4096 for chat, 16384 for retrieval-augmented prompts)"
    )


def _max_num_seqs_excessive(s: Subject) -> bool:
    mns = s.max_num_seqs
    if not mns or mns < MAX_NUM_SEQS_HIGH:
        return False
    need, _ = s.concurrency
    return need is None or mns > CONCURRENCY_HEADROOM * need


def _max_num_seqs_excessive_message(s: Subject) -> str:
    need, how = s.concurrency
    default = s.facts.default_max_num_seqs
    default_note = (
        f"; note vLLM's own default is {default} on this hardware" if default and default >= MAX_NUM_SEQS_HIGH else ""
    )
    return (
        f"max_num_seqs {s.max_num_seqs}"
        + (
            f" for at most {need:.0f} concurrent requests ({how})"
            if need
            else " without evidence of that much concurrency"
        )
        + f"; set it to 1.5-2x the real concurrency, usually 64-256{default_note}"
    )


def _device_share(s: Subject) -> float | None:
    """memory_utilization where it is set and a share of device memory (not of the CPU KV
    budget); None elsewhere."""
    return s.memory_utilization if s.facts.is_gpu else None


def _kv_cache_small(s: Subject) -> bool:
    if s.cpu_kv_cache is None:
        return False
    kv_tokens, mean_req, width = s.cpu_kv_cache
    if not mean_req or not width:
        return False
    return kv_tokens < width * mean_req


def _kv_cache_small_message(s: Subject) -> str:
    assert s.cpu_kv_cache is not None  # `_kv_cache_small` holds: the cache is known
    kv_tokens, mean_req, width = s.cpu_kv_cache
    assert mean_req  # and so is the mean request
    return (
        f"memory_utilization {s.memory_utilization:g} gives a KV cache of ~{kv_tokens:.0f} tokens, "
        f"~{kv_tokens / mean_req:.1f} average requests ({mean_req:.0f} tokens) for up to {width} "
        "concurrent: expect preemption"
    )


def _batched_tokens_below_max_num_seqs(s: Subject) -> bool:
    mnbt, mns = s.max_num_batched_tokens, s.max_num_seqs
    if mnbt is None or not mns:
        return False
    return mnbt < mns


def _batched_tokens_below_prompt(s: Subject) -> bool:
    mnbt, prompt = s.max_num_batched_tokens, s.longest_prompt  # prompt: None without a workload
    return mnbt is not None and prompt is not None and not s.chunked_prefill and mnbt < prompt


def _batched_tokens_tiny(s: Subject) -> bool:
    mnbt, prompt = s.max_num_batched_tokens, s.longest_prompt  # prompt: None without a workload
    return mnbt is not None and prompt is not None and s.chunked_prefill and mnbt * PREFILL_STEPS_MAX < prompt


def _batched_tokens_tiny_message(s: Subject) -> str:
    mnbt, prompt = s.max_num_batched_tokens, s.longest_prompt
    assert mnbt is not None and prompt is not None  # `_batched_tokens_tiny` holds: both are known
    return (
        f"max_num_batched_tokens {mnbt}: the longest prompt ({prompt} tokens) takes "
        f"{math.ceil(prompt / mnbt)} steps to prefill, raising its TTFT"
    )


def _still_has(s: Subject, param: str) -> bool:
    """The configuration sets `param`, and the installed vLLM still takes it."""
    return param in s.config and s.facts.still_has(param)


def _no_longer_has(s: Subject, param: str) -> bool:
    """The configuration sets `param`, but the installed vLLM no longer takes it."""
    return param in s.config and not s.facts.still_has(param)


def _no_headroom_message(s: Subject) -> str:
    default = s.facts.default_memory_utilization
    return f"memory_utilization {s.memory_utilization:g} leaves less than 10% of device memory free for spikes" + (
        f" (vLLM's own default is {default:g})" if default is not None else ""
    )


RULES: tuple[AntipatternRule, ...] = (
    AntipatternRule(
        "max_model_len_too_small",
        "error",
        "vLLM checks every request against max_model_len",
        _max_model_len_too_small,
        lambda s: (
            f"max_model_len {s.max_model_len} is below the workload's longest request "
            f"({s.longest_request} tokens): vLLM rejects such prompts or silently truncates the output"
        ),
        "applies on every engine",
    ),
    AntipatternRule(
        "max_model_len_oversized",
        "warning",
        "a context far beyond any request reserves memory for nothing and lets a runaway request grow",
        _max_model_len_oversized,
        _max_model_len_oversized_message,
        "partly: V1 allocates KV blocks on demand, so no KV is reserved per request any more, "
        "but the cache must still fit one max_model_len request at start (else kv_insufficient) "
        "and a runaway request may grow until it preempts the rest",
    ),
    AntipatternRule(
        "delay_factor_zero",
        "warning",
        "V0 tuning practice: a small delay batches arrivals; 0 runs many small batches",
        lambda s: _still_has(s, "scheduler_delay_factor") and s.config["scheduler_delay_factor"] == 0,
        lambda s: (
            "scheduler_delay_factor 0 schedules every iteration immediately, with small batches; "
            f"use {DELAY_FACTOR_RANGE[0]}-{DELAY_FACTOR_RANGE[1]}"
        ),
        lambda s: f"applies: {s.facts.vllm_label} runs the V0 scheduler",
    ),
    AntipatternRule(
        "delay_factor_obsolete",
        "info",
        "the installed vLLM's own argument parser",
        lambda s: _no_longer_has(s, "scheduler_delay_factor"),
        lambda s: (
            f"scheduler_delay_factor {s.config['scheduler_delay_factor']} has no effect: "
            f"{s.facts.vllm_label} has no such flag ({s.facts.removed('scheduler_delay_factor')} "
            "with the V0 scheduler)"
        ),
        "obsolete: V1 admits new prefills every step (as delay 0 did); the nearest knob, "
        "prefill_schedule_interval, acts on all engines only from 0.33",
    ),
    AntipatternRule(
        "max_num_seqs_excessive",
        "warning",
        "tuning practice: max_num_seqs at 1.5-2x the real concurrency, usually 64-256",
        _max_num_seqs_excessive,
        _max_num_seqs_excessive_message,
        "applies when the batch really gets that wide (every sequence gets less of each step); "
        "unused slots cost little on V1 beyond warmup and CUDA-graph memory",
    ),
    AntipatternRule(
        "swap_space_low",
        "warning",
        "V0 tuning practice: swap space lets preempted sequences resume without recomputing",
        lambda s: (
            _still_has(s, "swap_space")
            and s.config["swap_space"] is not None
            and s.config["swap_space"] < SWAP_SPACE_MIN_GIB
        ),
        lambda s: (
            f"swap_space {s.config['swap_space']} GiB: preempted sequences cannot be swapped; "
            f"use at least {SWAP_SPACE_MIN_GIB:g} GiB"
        ),
        lambda s: f"applies only where swapping exists ({s.facts.vllm_label} still takes --swap-space)",
    ),
    AntipatternRule(
        "swap_space_obsolete",
        "info",
        "the installed vLLM's own argument parser",
        lambda s: _no_longer_has(s, "swap_space"),
        lambda s: (
            f"swap_space {s.config['swap_space']} has no effect: {s.facts.vllm_label} has no such "
            f"flag ({s.facts.removed('swap_space')})"
        ),
        "obsolete: V1 recomputes preempted requests instead of swapping them; against preemption "
        "give the KV cache more memory or run fewer sequences",
    ),
    AntipatternRule(
        "memory_utilization_high",
        "warning",
        "tuning practice: 0.80-0.95 of device memory, 10-15% kept free for spikes and other processes",
        lambda s: (share := _device_share(s)) is not None and share > GPU_MEMORY_UTILIZATION_HIGH,
        lambda s: (
            f"memory_utilization {s.memory_utilization:g} > {GPU_MEMORY_UTILIZATION_HIGH}: no headroom "
            "for traffic spikes or other processes (OOM); keep 10-15% free"
        ),
        "applies",
    ),
    AntipatternRule(
        "memory_utilization_no_headroom",
        "info",
        "tuning practice: 10-15% of device memory kept free for spikes",
        lambda s: (
            (share := _device_share(s)) is not None
            and GPU_MEMORY_UTILIZATION_HEADROOM < share <= GPU_MEMORY_UTILIZATION_HIGH
        ),
        _no_headroom_message,
        "applies",
    ),
    AntipatternRule(
        "memory_utilization_low",
        "warning",
        "tuning practice: memory not given to the KV cache limits concurrency",
        lambda s: (share := _device_share(s)) is not None and share < GPU_MEMORY_UTILIZATION_LOW,
        lambda s: (
            f"memory_utilization {s.memory_utilization:g} < {GPU_MEMORY_UTILIZATION_LOW}: device memory "
            "left idle that could hold KV cache for more concurrent requests"
        ),
        "applies",
    ),
    AntipatternRule(
        "kv_cache_small",
        "warning",
        "KV cache arithmetic: a cache smaller than the batch's requests preempts them",
        _kv_cache_small,
        _kv_cache_small_message,
        "applies (on the CPU build memory_utilization is a share of the tuner's KV budget, "
        "not of RAM, so only 'too low' applies)",
    ),
    AntipatternRule(
        "batched_tokens_below_max_num_seqs",
        "error",
        "vLLM's start-up check",
        _batched_tokens_below_max_num_seqs,
        lambda s: (
            f"max_num_batched_tokens {s.max_num_batched_tokens} < max_num_seqs {s.max_num_seqs}: vLLM refuses to start"
        ),
        "applies",
    ),
    AntipatternRule(
        "batched_tokens_below_prompt",
        "error",
        "without chunked prefill a prompt must fit in one step",
        _batched_tokens_below_prompt,
        lambda s: (
            f"max_num_batched_tokens {s.max_num_batched_tokens} < the longest prompt "
            f"({s.longest_prompt} tokens) with chunked prefill off: such a prompt can never be scheduled"
        ),
        "applies; V1 even refuses to start when it is below max_model_len",
    ),
    AntipatternRule(
        "batched_tokens_tiny",
        "info",
        "with chunked prefill a prompt takes one step per max_num_batched_tokens",
        _batched_tokens_tiny,
        _batched_tokens_tiny_message,
        "applies",
    ),
    AntipatternRule(
        "prefix_caching_off",
        "warning",
        "prefix caching computes a shared prefix once; without it every request recomputes it",
        lambda s: s.config.get("enable_prefix_caching") is False and has_shared_prefix(s.workload),
        lambda s: (
            "enable_prefix_caching is off, but the workload shares prompt prefixes: every shared prefix is recomputed"
        ),
        "applies (on by default in V1)",
    ),
    AntipatternRule(
        "log_stats_off",
        "warning",
        "vLLM's /metrics are what the diagnosis reads",
        lambda s: bool(s.config.get("disable_log_stats")),
        lambda s: (
            "disable_log_stats removes every vllm:* metric from /metrics: queueing, KV use and "
            "preemptions cannot be diagnosed"
        ),
        "applies",
    ),
)


def antipatterns(
    config: dict[str, Any],
    workload: WorkloadSpec | None = None,
    *,
    facts: ServingFacts = ServingFacts(),
    metrics: dict[str, Any] | None = None,
) -> list[Finding]:
    """The anti-patterns in a configuration (canonical parameter names, as in scenarios).

    `workload` makes length and concurrency checks possible; `metrics` (a measured trial) lets
    the concurrency check use what the server really saw.
    """
    subject = Subject(config, workload, facts, metrics)
    return [rule.finding(subject) for rule in RULES if rule.holds(subject)]
