"""The decision tree's compute branches: first tokens are slow although requests did not wait
(`prefill_bound`), or each generated token is slow (`decode_bound`). High means an SLO is
violated, or a latency well above the idle server's or an absolute ceiling. `tree` calls them in
its order."""

from __future__ import annotations

import math

from loadgen import class_key
from objectives.diagnosis.facts import ServingFacts, effective_max_num_seqs
from objectives.diagnosis.readings import fmt_ms, has_shared_prefix, known, longest_prompt_tokens, metric_family, num
from objectives.diagnosis.results import Diagnosis
from objectives.diagnosis.thresholds import ITL_STALL_RATIO, LATENCY_X_UNLOADED, TTFT_HIGH_MS


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
