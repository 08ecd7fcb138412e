"""The per-cause checks of a trial that served: each returns the `Diagnosis` of its bottleneck,
or None where it does not hold. The scheduler's: the KV cache ran full and running requests were
preempted (`preemption`), or requests spent their time to first token waiting in the queue
(`queueing`); then the engine's compute: first tokens are slow although requests did not wait
(`prefill_bound`), or each generated token is slow (`decode_bound`). High means an SLO is
violated, or a latency well above the idle server's or an absolute ceiling. Its own module: the
tree in `tree` decides the order they are asked in and keeps the failure and measurement branches."""

from __future__ import annotations

import math

from loadgen import class_key
from objectives.diagnosis.bottleneck import Diagnosis
from objectives.diagnosis.facts import (
    ServingFacts,
    effective_max_num_seqs,
    fmt_ms,
    has_shared_prefix,
    known,
    longest_prompt_tokens,
    metric_family,
    num,
)
from objectives.diagnosis.thresholds import (
    ITL_STALL_RATIO,
    KV_FULL,
    LATENCY_X_UNLOADED,
    PREEMPTIONS_PER_REQUEST,
    QUEUE_SHARE_OF_TTFT,
    QUEUE_TIME_FLOOR_MS,
    TTFT_HIGH_MS,
)


def preemption(m, config, facts: ServingFacts, workload) -> Diagnosis | None:
    pre = num(m, "server_preemptions")
    done = num(m, "completed")
    if not known(pre) or pre < 1:
        return None
    per_req = pre / max(done, 1.0) if known(done) else math.inf
    if per_req < PREEMPTIONS_PER_REQUEST:
        return None
    kv = num(m, "server_kv_cache_usage_peak")
    evidence = [
        f"{pre:.0f} preemptions for {done:.0f} completed requests ({per_req:.2f} per request)"
        + (f"; KV cache usage peaked at {kv:.0%}" if known(kv) else "")
    ]
    steps = []
    if facts.still_has("swap_space"):
        steps.append("raise swap_space to at least 4 GB: a preempted request is then swapped out, not recomputed")
    else:
        steps.append(
            f"V0's answer, a larger swap-space, does not exist on V1 ({facts.removed('swap_space', product=False)}: "
            "a preempted request is recomputed), so give the KV cache more room instead:"
        )
    util = config.get("memory_utilization")
    steps.append(f"raise memory_utilization{f' (now {util:g})' if util is not None else ''}: more KV blocks")
    mns = effective_max_num_seqs(config, facts)
    steps.append(
        f"lower max_num_seqs{f' (now {mns})' if mns else ''} or cap max_num_active_seqs, so "
        "fewer sequences grow in the cache at once"
    )
    steps.append("raise watermark (e.g. 0.05-0.1) to keep blocks free at admission for running requests")
    if facts.is_gpu:
        steps.append("an fp8 kv_cache_dtype halves KV per token, so the same memory holds twice the tokens")
    return Diagnosis(
        "preemption",
        "The KV cache ran full and running requests were preempted (recomputed from scratch).",
        evidence=evidence,
        next_steps=steps,
    )


def queueing(m, config, facts: ServingFacts) -> Diagnosis | None:
    queue = num(m, "server_queue_time_mean_ms")
    sttft = num(m, "server_ttft_mean_ms")
    waiting_peak = num(m, "server_waiting_peak")
    waiting_mean = num(m, "server_waiting_mean")
    if known(queue) and known(sttft) and sttft > 0:
        if queue < QUEUE_TIME_FLOOR_MS or queue < QUEUE_SHARE_OF_TTFT * sttft:
            return None
        if known(waiting_peak) and waiting_peak < 1:
            return None
        share = queue / sttft
    elif known(waiting_mean) and waiting_mean >= 1:  # no queue-time histogram: the gauge alone
        share = math.nan
    else:
        return None
    evidence = [
        f"requests waited {fmt_ms(queue)} on average before being scheduled"
        + (f", {share:.0%} of the server's mean TTFT ({fmt_ms(sttft)})" if known(share) else "")
        + (f"; up to {waiting_peak:.0f} waiting (mean {waiting_mean:.1f})" if known(waiting_peak) else "")
    ]
    running = num(m, "server_running_peak")
    mns = effective_max_num_seqs(config, facts)
    kv = num(m, "server_kv_cache_usage_peak")
    steps = []
    if known(running) and mns and running >= mns:
        evidence.append(f"the batch was full: {running:.0f} running = max_num_seqs {mns}")
        steps.append(
            f"raise max_num_seqs above {mns} so the waiting requests join the batch (or max_num_active_seqs "
            "on vLLM >= 0.29, which needs no recompile)"
        )
    elif known(kv) and kv >= KV_FULL:
        evidence.append(f"admission was held back by the KV cache ({kv:.0%} used), not by max_num_seqs")
        steps.append("raise memory_utilization: V1 admits a request only when its prompt fits in the KV cache")
    else:
        if known(running):
            evidence.append(
                f"the batch was not full ({running:.0f} running"
                + (f" of max_num_seqs {mns}" if mns else "")
                + "): the engine itself is saturated"
            )
        steps.append(
            "the offered load exceeds this server's capacity: scale out (more replicas or a larger GPU) "
            "or lower the request rate"
        )
        steps.append("raise max_num_batched_tokens: more tokens per step, more throughput at some TTFT")
    if config.get("scheduler_delay_factor"):
        steps.append(
            "scheduler_delay_factor does nothing on V1 "
            f"({facts.removed('scheduler_delay_factor', product=False)}; new requests are admitted "
            "every step); lowering the delay factor, the V0 advice, is already the V1 behaviour"
        )
    return Diagnosis(
        "queueing",
        "Requests spent most of their time to first token waiting in the server's queue.",
        evidence=evidence,
        next_steps=steps,
    )


def _ttft_high(m, violated, unloaded, key="ttft_p95_ms") -> tuple[bool, str]:
    ttft = num(m, key)
    if any(metric_family(v) == "ttft" for v in violated):
        which = [v for v in violated if metric_family(v) == "ttft"]
        return True, f"TTFT SLO violated ({', '.join(which)})"
    ref = unloaded.get("ttft_median_ms")
    if ref and known(ttft) and ttft >= LATENCY_X_UNLOADED * ref:
        return True, f"TTFT p95 {fmt_ms(ttft)} is {ttft / ref:.1f}x the idle server's median {fmt_ms(ref)}"
    if known(ttft) and ttft > TTFT_HIGH_MS:
        return True, f"TTFT p95 {fmt_ms(ttft)} > {fmt_ms(TTFT_HIGH_MS)}"
    return False, ""


def prefill_bound(m, config, workload, violated, unloaded, queueing: bool) -> Diagnosis | None:
    if queueing:
        return None
    high, why = _ttft_high(m, violated, unloaded)
    if not high:
        return None
    evidence = [why]
    queue = num(m, "server_queue_time_mean_ms")
    sttft = num(m, "server_ttft_mean_ms")
    if known(queue) and known(sttft):
        evidence.append(f"little of it was queueing: {fmt_ms(queue)} of a {fmt_ms(sttft)} server TTFT")
    if workload is not None and len(workload.classes) > 1:
        per = sorted(
            (
                (c.longest_prompt_tokens(workload.endpoint), c.name, num(m, class_key("ttft_p95_ms", c.name)))
                for c in workload.classes
            ),
            reverse=True,
        )
        evidence.append(
            "TTFT p95 by class (longest prompt first): "
            + ", ".join(f"{name} {fmt_ms(t)} (prompts <= {n} tokens)" for n, name, t in per if known(t))
        )
    chunked = config.get("enable_chunked_prefill", True) is not False
    mnbt = config.get("max_num_batched_tokens")
    steps = []
    if not chunked:
        steps.append("enable_chunked_prefill: long prompts then share steps with decodes")
    if workload is not None:
        longest = longest_prompt_tokens(workload)
        if mnbt and chunked and longest > mnbt:
            steps.append(
                f"raise max_num_batched_tokens (now {mnbt}): the longest prompt ({longest} tokens) "
                f"needs {math.ceil(longest / mnbt)} steps to prefill"
            )
    lpt = config.get("long_prefill_token_threshold") or 0
    if lpt > 0:
        steps.append(
            f"lower long_prefill_token_threshold (now {lpt}) so long prompts take less of each "
            "step and short requests get their first token sooner"
        )
    else:
        steps.append(
            "set long_prefill_token_threshold (e.g. 256-1024) so a long prompt cannot take a "
            "whole step and short requests get their first token sooner"
        )
    if has_shared_prefix(workload) and config.get("enable_prefix_caching") is False:
        steps.append("enable_prefix_caching: the workload shares prompt prefixes, which are then computed once")
    steps.append(
        "V0's first answer, a lower scheduler_delay_factor, has no V1 knob: V1 already admits prefills every step"
    )
    return Diagnosis(
        "prefill_bound",
        "Time to first token is high and it is spent computing prompts, not waiting for a slot.",
        evidence=evidence,
        next_steps=steps,
    )


def decode_bound(m, config, violated, unloaded, facts: ServingFacts) -> Diagnosis | None:
    tpot = num(m, "tpot_p95_ms")
    why = ""
    if any(metric_family(v) in ("tpot", "itl") for v in violated):
        why = "TPOT/ITL SLO violated (" + ", ".join(v for v in violated if metric_family(v) in ("tpot", "itl")) + ")"
    else:
        ref = unloaded.get("tpot_median_ms")
        if ref and known(tpot) and tpot >= LATENCY_X_UNLOADED * ref:
            why = f"TPOT p95 {fmt_ms(tpot)} is {tpot / ref:.1f}x the idle server's median {fmt_ms(ref)}"
    if not why:
        return None
    evidence = [why]
    running = num(m, "server_running_peak")
    if known(running):
        evidence.append(f"up to {running:.0f} sequences decoded together (mean {num(m, 'server_running_mean'):.1f})")
    itl50, itl99 = num(m, "itl_median_ms"), num(m, "itl_p99_ms")
    stalled = known(itl50) and known(itl99) and itl50 > 0 and itl99 >= ITL_STALL_RATIO * itl50
    if stalled:
        evidence.append(
            f"inter-token gaps p99 {fmt_ms(itl99)} vs median {fmt_ms(itl50)}: decode steps stall behind prefill chunks"
        )
    mns = effective_max_num_seqs(config, facts)
    steps = [
        f"lower max_num_seqs{f' (now {mns})' if mns else ''} or max_num_active_seqs: fewer "
        "sequences per step, each step faster"
    ]
    if stalled:
        steps.append(
            "lower max_num_batched_tokens or set long_prefill_token_threshold, so prefill "
            "chunks take less of each decode step"
        )
    ref = unloaded.get("tpot_median_ms")
    if ref:
        steps.append(
            f"if even the idle TPOT ({fmt_ms(ref)}) is too slow, it is the model or its precision, "
            "not scheduling: a smaller or quantized model"
        )
    return Diagnosis(
        "decode_bound",
        "Generating each token is slow: decode steps carry too many sequences or too much prefill.",
        evidence=evidence,
        next_steps=steps,
    )
