"""The decision tree's scheduler branches: the KV cache ran full and running requests were preempted
(`preemption`), or requests spent their time to first token waiting in the queue (`queueing`).
`tree` calls them in its order."""

from __future__ import annotations

import math

from objectives.diagnosis.facts import ServingFacts, effective_max_num_seqs
from objectives.diagnosis.readings import fmt_ms, known, num
from objectives.diagnosis.results import Diagnosis
from objectives.diagnosis.thresholds import KV_FULL, PREEMPTIONS_PER_REQUEST, QUEUE_SHARE_OF_TTFT, QUEUE_TIME_FLOOR_MS


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
