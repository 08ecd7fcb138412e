"""The seeds' anti-patterns in a configuration: the seed 000 table and the pitfalls of seeds 001/002."""

from __future__ import annotations

import math
from typing import Any

from objectives.diagnosis.facts import ServingFacts, effective_max_num_seqs
from objectives.diagnosis.models import Finding
from objectives.diagnosis.readings import (has_shared_prefix, known, longest_prompt_tokens, mean_request_tokens,
                                           num)
from objectives.diagnosis.thresholds import (CONCURRENCY_HEADROOM, DELAY_FACTOR_RANGE,
                                             GPU_MEMORY_UTILIZATION_HEADROOM, GPU_MEMORY_UTILIZATION_HIGH,
                                             GPU_MEMORY_UTILIZATION_LOW, MAX_MODEL_LEN_SLACK, MAX_NUM_SEQS_HIGH,
                                             PREFILL_STEPS_MAX, SWAP_SPACE_MIN_GIB)
from objectives.workload import WorkloadSpec

def antipatterns(config: dict[str, Any], workload: WorkloadSpec | None = None, *,
                 facts: ServingFacts = ServingFacts(),
                 metrics: dict[str, Any] | None = None) -> list[Finding]:
    """The seeds' anti-patterns in a configuration (canonical parameter names, as in scenarios).

    `workload` makes length and concurrency checks possible; `metrics` (a measured trial) lets
    the concurrency check use what the server really saw.
    """
    out: list[Finding] = []
    longest = workload.longest_request_tokens() if workload is not None else None
    mml = config.get("max_model_len") or facts.model_max_len

    if longest and mml:
        if longest > mml:
            out.append(Finding(
                "max_model_len_too_small", "error",
                f"max_model_len {mml} is below the workload's longest request ({longest} tokens): "
                "vLLM rejects such prompts or silently truncates the output",
                "reference/vllm.md section 7", "applies on every engine"))
        elif mml > MAX_MODEL_LEN_SLACK * longest:
            out.append(Finding(
                "max_model_len_oversized", "warning",
                f"max_model_len {mml}{' (the model default)' if not config.get('max_model_len') else ''} "
                f"is {mml / longest:.0f}x the workload's longest request ({longest} tokens); "
                f"set it near {longest} (seed 000: 4096 for chat, 16384 for RAG)",
                "seed 000 anti-pattern table; seed 001 pitfalls",
                "partly: V1 allocates KV blocks on demand, so no KV is reserved per request any more, "
                "but the cache must still fit one max_model_len request at start (else kv_insufficient) "
                "and a runaway request may grow until it preempts the rest"))

    if "scheduler_delay_factor" in config:
        d = config["scheduler_delay_factor"]
        if facts.has_flag("--scheduler-delay-factor"):
            if d == 0:
                out.append(Finding(
                    "delay_factor_zero", "warning",
                    "scheduler_delay_factor 0 schedules every iteration immediately, with small batches; "
                    f"use {DELAY_FACTOR_RANGE[0]}-{DELAY_FACTOR_RANGE[1]}",
                    "seed 000 anti-pattern table", f"applies: {facts.vllm_label} runs the V0 scheduler"))
        else:
            out.append(Finding(
                "delay_factor_obsolete", "info",
                f"scheduler_delay_factor {d} has no effect: {facts.vllm_label} has no such flag "
                "(removed in vLLM 0.11 with the V0 scheduler)",
                "seed 000 anti-pattern table",
                "obsolete: V1 admits new prefills every step (as delay 0 did); the nearest knob, "
                "prefill_schedule_interval, acts on all engines only from 0.33"))

    mns = config.get("max_num_seqs")
    if mns and mns >= MAX_NUM_SEQS_HIGH:
        need, how = None, ""
        if metrics is not None and known(num(metrics, "server_running_peak")):
            need = num(metrics, "server_running_peak") + max(num(metrics, "server_waiting_peak"), 0)
            how = "measured peak running + waiting"
        elif workload is not None and workload.arrival.mode == "closed":
            need, how = float(workload.arrival.concurrency), "the workload's closed-loop users"
        if need is None or mns > CONCURRENCY_HEADROOM * need:
            default_note = (f"; note vLLM's own default is {facts.default_max_num_seqs} on this hardware"
                            if facts.default_max_num_seqs and facts.default_max_num_seqs >= MAX_NUM_SEQS_HIGH
                            else "")
            out.append(Finding(
                "max_num_seqs_excessive", "warning",
                f"max_num_seqs {mns}" + (f" for at most {need:.0f} concurrent requests ({how})" if need else
                                         " without evidence of that much concurrency")
                + f"; set it to 1.5-2x the real concurrency, usually 64-256{default_note}",
                "seed 000 anti-pattern table; seed 002 max-num-seqs",
                "applies when the batch really gets that wide (every sequence gets less of each step); "
                "unused slots cost little on V1 beyond warmup and CUDA-graph memory"))

    if "swap_space" in config:
        s = config["swap_space"]
        if facts.has_flag("--swap-space"):
            if s is not None and s < SWAP_SPACE_MIN_GIB:
                out.append(Finding(
                    "swap_space_low", "warning",
                    f"swap_space {s} GiB: preempted sequences cannot be swapped; use at least "
                    f"{SWAP_SPACE_MIN_GIB:g} GiB", "seed 000 anti-pattern table",
                    f"applies only where swapping exists ({facts.vllm_label} still takes --swap-space)"))
        else:
            out.append(Finding(
                "swap_space_obsolete", "info",
                f"swap_space {s} has no effect: {facts.vllm_label} has no such flag (removed in vLLM 0.18)",
                "seed 000 anti-pattern table",
                "obsolete: V1 recomputes preempted requests instead of swapping them; against preemption "
                "give the KV cache more memory or run fewer sequences"))

    util = config.get("memory_utilization")
    if util is not None and facts.is_gpu:
        if util > GPU_MEMORY_UTILIZATION_HIGH:
            out.append(Finding(
                "memory_utilization_high", "warning",
                f"memory_utilization {util:g} > {GPU_MEMORY_UTILIZATION_HIGH}: no headroom for traffic "
                "spikes or other processes (OOM); keep 10-15% free",
                "seed 001 --gpu-memory-utilization; seed 002", "applies"))
        elif util > GPU_MEMORY_UTILIZATION_HEADROOM:
            out.append(Finding(
                "memory_utilization_no_headroom", "info",
                f"memory_utilization {util:g} leaves less than the 10% headroom seed 001 asks for "
                "(vLLM's own default is 0.92)", "seed 001", "applies"))
        elif util < GPU_MEMORY_UTILIZATION_LOW:
            out.append(Finding(
                "memory_utilization_low", "warning",
                f"memory_utilization {util:g} < {GPU_MEMORY_UTILIZATION_LOW}: device memory left idle "
                "that could hold KV cache for more concurrent requests", "seed 002", "applies"))
    if util is not None and facts.is_gpu is False and facts.cpu_kv_budget_bytes and facts.kv_bytes_per_token \
            and workload is not None:
        kv_tokens = util * facts.cpu_kv_budget_bytes / facts.kv_bytes_per_token
        mean_req = mean_request_tokens(workload)
        width = effective_max_num_seqs(config, facts)
        if workload.arrival.mode == "closed" and width:
            width = min(width, workload.arrival.concurrency)
        if mean_req and width and kv_tokens < width * mean_req:
            out.append(Finding(
                "kv_cache_small", "warning",
                f"memory_utilization {util:g} gives a KV cache of ~{kv_tokens:.0f} tokens, ~{kv_tokens / mean_req:.1f} "
                f"average requests ({mean_req:.0f} tokens) for up to {width} concurrent: expect preemption",
                "seed 002 (too low wastes memory and lowers concurrency)",
                "applies (on the CPU build memory_utilization is a share of the tuner's KV budget, "
                "not of RAM, so only 'too low' applies)"))

    chunked = config.get("enable_chunked_prefill", True) is not False
    mnbt = config.get("max_num_batched_tokens")
    if mnbt is not None:
        if mns and mnbt < mns:
            out.append(Finding(
                "batched_tokens_below_max_num_seqs", "error",
                f"max_num_batched_tokens {mnbt} < max_num_seqs {mns}: vLLM refuses to start",
                "reference/vllm.md section 6", "applies"))
        if workload is not None:
            longest_prompt = longest_prompt_tokens(workload)
            if not chunked and mnbt < longest_prompt:
                out.append(Finding(
                    "batched_tokens_below_prompt", "error",
                    f"max_num_batched_tokens {mnbt} < the longest prompt ({longest_prompt} tokens) with "
                    "chunked prefill off: such a prompt can never be scheduled",
                    "seed 002 max-num-batched-tokens / chunked prefill",
                    "applies; V1 even refuses to start when it is below max_model_len"))
            elif chunked and mnbt * PREFILL_STEPS_MAX < longest_prompt:
                out.append(Finding(
                    "batched_tokens_tiny", "info",
                    f"max_num_batched_tokens {mnbt}: the longest prompt ({longest_prompt} tokens) takes "
                    f"{math.ceil(longest_prompt / mnbt)} steps to prefill, raising its TTFT",
                    "seed 002 max-num-batched-tokens", "applies"))

    if config.get("enable_prefix_caching") is False and has_shared_prefix(workload):
        out.append(Finding(
            "prefix_caching_off", "warning",
            "enable_prefix_caching is off, but the workload shares prompt prefixes: every shared "
            "prefix is recomputed", "seed 001 (prefix caching is free performance); seed 000 mixed_workload",
            "applies (on by default in V1)"))

    if config.get("disable_log_stats"):
        out.append(Finding(
            "log_stats_off", "warning",
            "disable_log_stats removes every vllm:* metric from /metrics: queueing, KV use and "
            "preemptions cannot be diagnosed", "reference/vllm.md section 2", "applies"))
    return out
