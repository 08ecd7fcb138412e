"""The bottleneck decision tree: one trial's bottleneck from its metrics (`diagnose`), and what the
study calls for each trial (`diagnose_trial`): the tree's diagnosis with the configuration's
anti-patterns. What it returns is a `Diagnosis` (its bottleneck, one of `BOTTLENECKS`, with the
evidence, next steps and findings), and `summarize` counts the trials each bottleneck limited.

Branches are checked in the order the package docstring gives (causes before symptoms); the
first that holds names the bottleneck, the others are reported as `also`. The failure and
measurement branches come first here; then the scheduler's: the KV cache ran full and running
requests were preempted (`preemption`), or requests spent their time to first token waiting in
the queue (`queueing`); then the engine's compute: first tokens are slow although requests did
not wait (`prefill_bound`), or each generated token is slow (`decode_bound`). High means an SLO
is violated, or a latency well above the idle server's or an absolute ceiling."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from loadgen import CLIENT_BEHIND, WorkloadSpec, class_key
from objectives.diagnosis.antipatterns import Finding, antipatterns
from objectives.diagnosis.facts import (
    ServingFacts,
    effective_max_num_seqs,
    fmt_ms,
    has_shared_prefix,
    known,
    longest_prompt_tokens,
    metric_family,
    num,
    violated_metrics,
)
from objectives.diagnosis.thresholds import (
    BATCH_HALF,
    CLIENT_LAG_FLOOR_MS,
    CLIENT_LAG_SHARE_OF_TTFT,
    ERROR_RATE_MAX,
    ITL_STALL_RATIO,
    KV_FULL,
    LATENCY_X_UNLOADED,
    PREEMPTIONS_PER_REQUEST,
    QUEUE_SHARE_OF_TTFT,
    QUEUE_TIME_FLOOR_MS,
    TTFT_HIGH_MS,
)
from serving import Failure, FailureClass, FailurePhase

Bottleneck = Literal[
    "startup_failure",
    "server_errors",
    "client_bound",
    "preemption",
    "queueing",
    "prefill_bound",
    "decode_bound",
    "healthy",
]
BOTTLENECKS: tuple[str, ...] = get_args(Bottleneck)


@dataclass
class Diagnosis:
    bottleneck: str  # one of BOTTLENECKS
    headline: str  # one sentence
    evidence: list[str] = field(default_factory=list)  # the numbers that decided it
    next_steps: list[str] = field(default_factory=list)  # parameters and directions
    also: list[str] = field(default_factory=list)  # other symptoms, lower in the tree
    slo_met: bool | None = None
    findings: list[Finding] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["findings"] = [f.as_dict() for f in self.findings]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Diagnosis:
        return cls(**{**d, "findings": [Finding(**f) for f in d.get("findings", [])]})

    def markdown(self) -> str:
        """For optuna-dashboard notes and the report."""
        lines = [f"**Bottleneck: {self.bottleneck.replace('_', ' ')}**. {self.headline}", ""]
        for title, items in (("Evidence", self.evidence), ("Try next", self.next_steps), ("Also seen", self.also)):
            if items:
                lines.append(f"*{title}:*")
                lines += [f"- {x}" for x in items]
                lines.append("")
        if self.findings:
            lines.append("*Configuration anti-patterns:*")
            lines += [f"- [{f.severity}] {f.message} ({f.applies_to_v1})" for f in self.findings]
        return "\n".join(lines).rstrip() + "\n"


def summarize(diagnoses: Iterable[dict[str, Any]]) -> dict[str, int]:
    """How many trials each bottleneck limited, in tree order."""
    counts = dict.fromkeys(BOTTLENECKS, 0)
    for d in diagnoses:
        if d:
            counts[d["bottleneck"]] = counts.get(d["bottleneck"], 0) + 1
    return {k: v for k, v in counts.items() if v}


_NEVER_STARTED = {FailurePhase.PRECHECK: "was rejected before starting", FailurePhase.STARTUP: "failed to start"}


def _startup_failure(failure: Failure) -> Diagnosis:
    cls = failure.cls.value
    where = _NEVER_STARTED.get(failure.phase, "failed")
    who = "The load generator" if failure.cls == FailureClass.LOAD_ERROR else "The server"
    return Diagnosis(
        "startup_failure",
        f"{who} {where} ({cls}); nothing was measured.",
        evidence=[f"{cls} at {failure.phase.value}" + (f": {failure.line}" if failure.line else "")],
        next_steps=failure.cls.advice,
    )


# --- the decision tree ---------------------------------------------------------------------


def diagnose(
    metrics: dict[str, Any],
    config: dict[str, Any],
    workload: WorkloadSpec | None = None,
    *,
    constraints: dict[str, float] | None = None,
    failure: Failure | None = None,
    unloaded: dict[str, float] | None = None,
    facts: ServingFacts = ServingFacts(),
) -> Diagnosis:
    """Name the trial's bottleneck from its metrics (client side and server `/metrics` deltas).

    `constraints`: the study's SLO constraint values (key `metric<=bound`, > 0 violated);
    `unloaded`: calibration medians on an idle server (`ttft_median_ms`, `tpot_median_ms`, ...)
    that make "high" relative to this machine; `failure`: the trial's failure, if any.
    """
    m = metrics or {}
    completed = num(m, "completed")
    if failure and (failure.phase.before_load or not known(completed)):
        return _startup_failure(failure)

    violated = violated_metrics(constraints)
    slo_met = (not violated) if constraints is not None else None
    unloaded = unloaded or {}
    symptoms: list[Diagnosis] = []

    err = num(m, "error_rate")
    if failure or (known(err) and err > ERROR_RATE_MAX):
        symptoms.append(_server_errors(m, config, failure, err))
    client = _client_bound(m)
    if client:
        symptoms.append(client)
    pre = preemption(m, config, facts, workload)
    if pre:
        symptoms.append(pre)
    queue = queueing(m, config, facts)
    if queue:
        symptoms.append(queue)
    prefill = prefill_bound(m, config, workload, violated, unloaded, queue is not None)
    if prefill:
        symptoms.append(prefill)
    decode = decode_bound(m, config, violated, unloaded, facts)
    if decode:
        symptoms.append(decode)

    if symptoms:
        result = symptoms[0]
        result.also = [f"{s.bottleneck.replace('_', ' ')}: {s.evidence[0]}" for s in symptoms[1:]]
    else:
        result = _healthy(m, config, facts, violated)
    result.also += _side_notes(m, config, workload)
    result.slo_met = slo_met
    if slo_met is not None:
        result.headline += " Meets every SLO." if slo_met else f" Violates: {', '.join(dict.fromkeys(violated))}."
    return result


def _server_errors(m, config, failure: Failure | None, err) -> Diagnosis:
    evidence = []
    if failure:
        evidence.append(f"the server died under load ({failure.cls.value}: {failure.line or 'see its log'})")
    if known(err):
        evidence.append(
            f"error rate {err:.1%} ({num(m, 'failed'):.0f} of "
            f"{num(m, 'failed') + num(m, 'completed'):.0f} requests) > {ERROR_RATE_MAX:.0%}"
        )
    steps = [
        "read the trial's server log and the client's error kinds: 400s mean prompt + max_tokens "
        "exceeds max_model_len, timeouts mean the queue (see waiting) outgrew request_timeout_s"
    ]
    if failure and failure.cls == FailureClass.OOM:
        steps.append("out of memory under load: lower memory_utilization or max_num_seqs, or a quantized model")
    steps.append("limit max_tokens per request at the gateway so one request cannot hog the KV cache")
    return Diagnosis(
        "server_errors",
        "Requests failed: the other metrics describe the survivors only.",
        evidence=evidence,
        next_steps=steps,
    )


def _client_bound(m) -> Diagnosis | None:
    lag99 = num(m, "schedule_lag_p99_ms")
    ttft50 = num(m, "ttft_median_ms")
    if not known(lag99) or lag99 <= CLIENT_LAG_FLOOR_MS:
        return None
    if known(ttft50) and lag99 < CLIENT_LAG_SHARE_OF_TTFT * ttft50:
        return None
    lag50, lagmax = num(m, "schedule_lag_p50_ms"), num(m, "schedule_lag_max_ms")
    evidence = [
        f"the client sent requests late: schedule lag p99 {fmt_ms(lag99)} (median {fmt_ms(lag50)}, "
        f"max {fmt_ms(lagmax)})" + (f", more than the median TTFT of {fmt_ms(ttft50)}" if known(ttft50) else "")
    ]
    client_ttft, server_ttft = num(m, "ttft_mean_ms"), num(m, "server_ttft_mean_ms")
    if known(client_ttft) and known(server_ttft) and client_ttft > server_ttft:
        evidence.append(
            f"it also read responses late: its TTFT mean {fmt_ms(client_ttft)} against the "
            f"server's own {fmt_ms(server_ttft)}"
        )
    return Diagnosis(
        "client_bound",
        "The load generator could not keep to its schedule: requests went out late and its timings "
        "include its own delays, so this trial measured the client as much as the server.",
        evidence=evidence,
        next_steps=[
            "give the client its own CPU core (taskset) and never share it with the vLLM worker",
            "use the uvloop event loop / the lighter client for high request rates",
            "or lower the request rate, and re-measure before trusting this trial",
        ],
    )


def _healthy(m, config, facts: ServingFacts, violated) -> Diagnosis:
    evidence = []
    queue, pre = num(m, "server_queue_time_mean_ms"), num(m, "server_preemptions")
    if known(queue):
        evidence.append(f"queue time mean {fmt_ms(queue)}")
    if known(pre):
        evidence.append(f"{pre:.0f} preemptions")
    lag = num(m, "schedule_lag_p99_ms")
    if known(lag):
        evidence.append(f"client schedule lag p99 {fmt_ms(lag)}")
    steps = []
    running, kv = num(m, "server_running_peak"), num(m, "server_kv_cache_usage_peak")
    mns = effective_max_num_seqs(config, facts)
    if known(running) and mns and running < BATCH_HALF * mns:
        steps.append(
            f"the batch never got half full ({running:.0f} of {mns}): this config has headroom "
            "for more load; max_num_seqs is not what limits it"
        )
    if known(kv) and kv < BATCH_HALF:
        steps.append(f"the KV cache peaked at {kv:.0%}: memory_utilization could be lower without cost at this load")
    if violated:
        steps.append("an SLO is violated without a dominant server symptom: compare per-class metrics")
    headline = "No bottleneck crossed its threshold." if not violated else "No single bottleneck crossed its threshold."
    return Diagnosis("healthy", headline, evidence=evidence, next_steps=steps)


def _side_notes(m, config, workload) -> list[str]:
    notes = []
    if has_shared_prefix(workload):
        if config.get("enable_prefix_caching") is False:
            notes.append(
                "prefix caching is off although the workload shares prompt prefixes: each is recomputed per request"
            )
        else:
            hit = num(m, "server_prefix_cache_hit_rate")
            if known(hit):
                notes.append(f"prefix cache hit rate {hit:.0%} of prompt tokens")
    lag = num(m, "schedule_lag_p99_ms")
    if num(m, CLIENT_BEHIND) >= 1 and not (known(lag) and lag > CLIENT_LAG_SHARE_OF_TTFT * num(m, "ttft_median_ms")):
        notes.append(
            f"the load generator flagged schedule lag (p99 {fmt_ms(lag)}), small next to the "
            "latencies measured: the results stand"
        )
    return notes


def diagnose_trial(
    metrics: dict[str, Any],
    config: dict[str, Any],
    workload: WorkloadSpec | None,
    failure: Failure | None = None,
    *,
    constraints: dict[str, float] | None = None,
    unloaded: dict[str, float] | None = None,
    facts: ServingFacts = ServingFacts(),
) -> Diagnosis:
    """Diagnosis and anti-patterns of one trial (stored as `as_dict()` in `autotune_trials.diagnosis`).

    `facts`: which parameters the installed vLLM takes, CPU or GPU, the KV budget, vLLM's defaults
    (`facts_for_launch(ctx)` in a study); without them the checks assume a current
    V1 vLLM and skip hardware-specific ones.
    """
    d = diagnose(metrics, config, workload, constraints=constraints, failure=failure, unloaded=unloaded, facts=facts)
    d.findings = antipatterns(
        config, workload, facts=facts, metrics=metrics if d.bottleneck != "startup_failure" else None
    )
    return d


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
