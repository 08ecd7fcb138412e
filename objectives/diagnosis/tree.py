"""The bottleneck decision tree: one trial's bottleneck from its metrics (`diagnose`), and what the
study calls for each trial (`diagnose_trial`): the tree's diagnosis with the configuration's
anti-patterns. What it returns is a `Diagnosis` (in `bottleneck`).

Branches are checked in the order the package docstring gives (causes before symptoms); the
first that holds names the bottleneck, the others are reported as `also`. The failure and
measurement branches are here; the scheduler's and the engine's compute branches, asked in
turn after them, are in `causes`."""

from __future__ import annotations

from typing import Any

from loadgen import CLIENT_BEHIND, WorkloadSpec
from objectives.diagnosis.antipatterns import antipatterns
from objectives.diagnosis.bottleneck import Diagnosis
from objectives.diagnosis.causes import decode_bound, preemption, prefill_bound, queueing
from objectives.diagnosis.facts import (
    ServingFacts,
    effective_max_num_seqs,
    fmt_ms,
    has_shared_prefix,
    known,
    num,
    violated_metrics,
)
from objectives.diagnosis.thresholds import (
    BATCH_HALF,
    CLIENT_LAG_FLOOR_MS,
    CLIENT_LAG_SHARE_OF_TTFT,
    ERROR_RATE_MAX,
)
from serving import Failure, FailureClass, FailurePhase

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
