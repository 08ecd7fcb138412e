"""Why a trial performed as it did, and which configurations the seeds call anti-patterns.

Pure functions over what a trial recorded: its flat metrics (client side and the server's
/metrics deltas, `server_*`), its configuration, the workload and its SLO results. No I/O.

`diagnose` walks the decision tree of seed 000 (section 4.2, `../shared/seeds/`), in an order
that puts causes before their symptoms:

    never served -> startup_failure      requests failed -> server_errors
    client late  -> client_bound         (the measurement itself is off: fix that first)
    KV exhausted -> preemption           (preempted requests queue again, so before queueing)
    long waits   -> queueing             TTFT high, not from waiting -> prefill_bound
    TPOT high    -> decode_bound         nothing crossed -> healthy

The seeds were written for vLLM's V0 engine. Where their advice names a knob V1 no longer has
(`--scheduler-delay-factor` removed in 0.11, `--swap-space` in 0.18), the next steps name the
V1 knob that does the same job, and say so.

`antipatterns` checks a configuration against the seed 000 anti-pattern table and the pitfalls
of seeds 001/002, saying for each whether it still applies on vLLM V1.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Literal

import numpy as np

from objectives.metrics import DEFAULT_LAG_LIMIT_MS
from objectives.workload import WorkloadSpec

Bottleneck = Literal["startup_failure", "server_errors", "client_bound", "preemption", "queueing",
                     "prefill_bound", "decode_bound", "healthy"]
BOTTLENECKS: tuple[str, ...] = ("startup_failure", "server_errors", "client_bound", "preemption",
                                "queueing", "prefill_bound", "decode_bound", "healthy")

# --- thresholds ----------------------------------------------------------------------------
# Failed requests: the scenarios' own `error_rate <= 0.01` SLO (configs/*.yaml); seed 000's tree
# branch "错误率突增" (error rate jumps).
ERROR_RATE_MAX = 0.01
# Client lag: the load generator flags any p99 schedule lag above 5 ms (objectives/metrics.py).
# On a shared 2-core host that trips whenever vLLM takes the CPU: 36 ms p99 in the recorded
# queue-bound run (TTFT median 10.6 s), 9 ms in the unstarved control (TTFT median 33 ms). The
# client is the bottleneck only when the p99 request went out later than a typical request
# takes to get its first token: the starved recording has 164 ms against 53 ms (3.1x), the
# control 0.29x (tests/fixtures/runs/).
CLIENT_LAG_FLOOR_MS = DEFAULT_LAG_LIMIT_MS
CLIENT_LAG_SHARE_OF_TTFT = 1.0
# Preemption: V1 preempts only when a running request cannot get another KV block, so every
# preemption means the cache was full; each one recomputes that request's whole prefill. One
# preempted request in twenty is where that recompute becomes a visible share of the work.
PREEMPTIONS_PER_REQUEST = 0.05
# "KV cache near 100%" (seed 001, monitoring section). Gauges are sampled once a second, so
# short peaks are missed: 0.9 of the cache sampled counts as full.
KV_FULL = 0.9
# Queueing (seed 000: "排队时间长? waiting 队列积压?"): requests wait at least as long in the
# queue as half their time to first token on the server, with somebody actually waiting.
QUEUE_SHARE_OF_TTFT = 0.5
QUEUE_TIME_FLOOR_MS = 10.0  # below one scheduler step nothing is "long"
# "TTFT 很高 (>1s)" (seed 000 tree, first branch), used when no TTFT SLO or calibration says more.
TTFT_HIGH_MS = 1000.0
# Relative to the idle server: the TPOT SLO of configs/mixed.yaml (x_unloaded: 4).
LATENCY_X_UNLOADED = 4.0
# A p99 inter-token gap this many times its median: decode steps stalled behind prefill chunks.
ITL_STALL_RATIO = 5.0
# Headroom (seed 000 tree "running 序列数很少"): the batch never got half full.
BATCH_HALF = 0.5

# --- anti-pattern thresholds ---------------------------------------------------------------
# Seed 000's table: max-model-len 32768 for chat where 4096 does (8x). 4x the longest request
# leaves room for the workload to grow and still catches the seed's example.
MAX_MODEL_LEN_SLACK = 4.0
# Seed 000: "max-num-seqs = 1024" is the anti-pattern, "通常 64-256"; seed 002: set it to
# 1.5-2x the real concurrency. Flag from twice the top of the seed's range.
MAX_NUM_SEQS_HIGH = 512
CONCURRENCY_HEADROOM = 2.0
# Seed 002: --gpu-memory-utilization best 80-95%, 0.95 the aggressive end; seed 001: keep
# 10-15% free for spikes.
GPU_MEMORY_UTILIZATION_HIGH = 0.95
GPU_MEMORY_UTILIZATION_HEADROOM = 0.90
GPU_MEMORY_UTILIZATION_LOW = 0.80
# Seed 000 (swap-space row): "至少设 4GB".
SWAP_SPACE_MIN_GIB = 4.0
# Seed 000's recommended delay factors: 0.05-0.15 for interactive and mixed loads.
DELAY_FACTOR_RANGE = (0.05, 0.15)
# With chunked prefill, a prompt needing more steps than this to prefill makes its TTFT a
# multiple of a step (seed 002: larger max-num-batched-tokens, higher throughput, higher TTFT).
PREFILL_STEPS_MAX = 8


@dataclass(frozen=True)
class Finding:
    """One anti-pattern in a configuration."""

    code: str
    severity: Literal["error", "warning", "info"]
    message: str
    source: str  # which seed (or reference) says so
    applies_to_v1: str  # whether and how the seed's concern holds on vLLM V1

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


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
    def from_dict(cls, d: dict[str, Any]) -> "Diagnosis":
        return cls(**{**d, "findings": [Finding(**f) for f in d.get("findings", [])]})

    def markdown(self) -> str:
        """For optuna-dashboard notes and the report."""
        lines = [f"**Bottleneck: {self.bottleneck.replace('_', ' ')}**. {self.headline}", ""]
        for title, items in (("Evidence", self.evidence), ("Try next", self.next_steps),
                             ("Also seen", self.also)):
            if items:
                lines.append(f"*{title}:*")
                lines += [f"- {x}" for x in items]
                lines.append("")
        if self.findings:
            lines.append("*Configuration anti-patterns:*")
            lines += [f"- [{f.severity}] {f.message} ({f.applies_to_v1})" for f in self.findings]
        return "\n".join(lines).rstrip() + "\n"


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


# --- helpers -------------------------------------------------------------------------------

def _num(metrics: dict[str, Any], key: str) -> float:
    v = metrics.get(key)  # stored JSON has None where the run had NaN
    try:
        return math.nan if v is None else float(v)
    except (TypeError, ValueError):
        return math.nan


def _ok(x: float) -> bool:
    return x is not None and not math.isnan(x)


def _ms(x: float) -> str:
    return f"{x / 1000:.1f} s" if x >= 10_000 else f"{x:.0f} ms" if x >= 10 else f"{x:.1f} ms"


def violated_metrics(constraints: dict[str, float] | None) -> list[str]:
    """Metric names of violated SLOs, from the study's constraint keys (`metric<=bound`)."""
    out = []
    for key, value in (constraints or {}).items():
        if value is not None and value > 0:
            out.append(key.split("<=")[0].split(">=")[0])
    return out


def _family(metric: str) -> str:
    return metric.split("@")[0].split("_")[0]


def _mean_length(dist, seed: int = 0, n: int = 4000) -> float:
    return float(dist.sample(np.random.default_rng(seed), n).mean())


def _mean_request_tokens(workload: WorkloadSpec) -> float | None:
    total_w, acc = 0.0, 0.0
    for c in workload.classes:
        if c.prompt_tokens is None or c.output_tokens is None:
            return None
        acc += c.weight * (_mean_length(c.prompt_tokens) + _mean_length(c.output_tokens))
        total_w += c.weight
    return acc / total_w if total_w else None


def _longest_prompt(workload: WorkloadSpec) -> int:
    return max(c.longest_prompt_tokens(workload.endpoint) for c in workload.classes)


def _effective_max_num_seqs(config: dict[str, Any], facts: ServingFacts) -> int | None:
    mns = config.get("max_num_seqs") or facts.default_max_num_seqs
    active = config.get("max_num_active_seqs")
    if mns and active:
        return min(int(mns), int(active))
    return int(mns) if mns else (int(active) if active else None)


def _has_shared_prefix(workload: WorkloadSpec | None) -> bool:
    return workload is not None and any(c.shared_prefix is not None for c in workload.classes)


# --- startup failures ----------------------------------------------------------------------

_FAILURE_STEPS: dict[str, list[str]] = {
    "kv_insufficient": [
        "raise memory_utilization (the KV cache must hold at least one max_model_len request)",
        "or lower max_model_len towards the workload's longest request",
    ],
    "mem_budget_unavailable": [
        "lower memory_utilization: the memory it asks for was not free at start",
        "check that no earlier server (another trial, another user) still holds memory",
    ],
    "oom": [
        "lower memory_utilization or max_num_seqs (the sampler warmup allocates max_num_seqs requests)",
        "a smaller or quantized model (seed 000 tree: smaller model / more quantization)",
    ],
    "invalid_config": ["fix the combination the line names; narrow the search space so it is never sampled"],
    "invalid_flag": ["the installed vLLM lacks this flag: drop it from the scenario (see `autotune params`)"],
    "start_timeout": ["raise server.startup_timeout_s; keep enforce_eager on CPU (no compile at start)"],
    "port_busy": ["transient: run the study again (it resumes)"],
}


def _startup_failure(failure_class: str, phase: str | None, line: str | None) -> Diagnosis:
    where = {"precheck": "was rejected before starting", "startup": "failed to start"}.get(
        phase or "startup", "failed")
    return Diagnosis(
        "startup_failure", f"The server {where} ({failure_class}); nothing was measured.",
        evidence=[f"{failure_class}" + (f" at {phase}" if phase else "") + (f": {line}" if line else "")],
        next_steps=list(_FAILURE_STEPS.get(failure_class, ["read the trial's server log for the root cause"])))


# --- the decision tree ---------------------------------------------------------------------

def diagnose(metrics: dict[str, Any], config: dict[str, Any], workload: WorkloadSpec | None = None, *,
             constraints: dict[str, float] | None = None, failure_class: str | None = None,
             failure_phase: str | None = None, failure_line: str | None = None,
             unloaded: dict[str, float] | None = None,
             facts: ServingFacts = ServingFacts()) -> Diagnosis:
    """Name the trial's bottleneck from its metrics (client side and server `/metrics` deltas).

    `constraints`: the study's SLO constraint values (key `metric<=bound`, > 0 violated);
    `unloaded`: calibration medians on an idle server (`ttft_median_ms`, `tpot_median_ms`, ...)
    that make "high" relative to this machine; `failure_*`: the trial's failure, if any.
    """
    m = metrics or {}
    completed = _num(m, "completed")
    if failure_class and (failure_phase in (None, "precheck", "startup") or not _ok(completed)):
        return _startup_failure(failure_class, failure_phase, failure_line)

    violated = violated_metrics(constraints)
    slo_met = (not violated) if constraints is not None else None
    unloaded = unloaded or {}
    symptoms: list[Diagnosis] = []

    err = _num(m, "error_rate")
    if failure_class or (_ok(err) and err > ERROR_RATE_MAX):
        symptoms.append(_server_errors(m, config, failure_class, failure_line, err))
    client = _client_bound(m)
    if client:
        symptoms.append(client)
    pre = _preemption(m, config, facts, workload)
    if pre:
        symptoms.append(pre)
    queue = _queueing(m, config, facts)
    if queue:
        symptoms.append(queue)
    prefill = _prefill_bound(m, config, workload, violated, unloaded, queue is not None)
    if prefill:
        symptoms.append(prefill)
    decode = _decode_bound(m, config, violated, unloaded, facts)
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
        result.headline += (" Meets every SLO." if slo_met else
                            f" Violates: {', '.join(dict.fromkeys(violated))}.")
    return result


def _server_errors(m, config, failure_class, failure_line, err) -> Diagnosis:
    evidence = []
    if failure_class:
        evidence.append(f"the server died under load ({failure_class}: {failure_line or 'see its log'})")
    if _ok(err):
        evidence.append(f"error rate {err:.1%} ({_num(m, 'failed'):.0f} of "
                        f"{_num(m, 'failed') + _num(m, 'completed'):.0f} requests) > {ERROR_RATE_MAX:.0%}")
    steps = ["read the trial's server log and the client's error kinds: 400s mean prompt + max_tokens "
             "exceeds max_model_len, timeouts mean the queue (see waiting) outgrew request_timeout_s"]
    if failure_class == "oom":
        steps.append("out of memory under load (seed 000 tree: really out of memory?): lower memory_utilization or "
                     "max_num_seqs, or a quantized model")
    steps.append("limit max_tokens per request at the gateway so one request cannot hog the KV cache "
                 "(seed 001)")
    return Diagnosis("server_errors", "Requests failed: the other metrics describe the survivors only.",
                     evidence=evidence, next_steps=steps)


def _client_bound(m) -> Diagnosis | None:
    lag99 = _num(m, "schedule_lag_p99_ms")
    ttft50 = _num(m, "ttft_median_ms")
    if not _ok(lag99) or lag99 <= CLIENT_LAG_FLOOR_MS:
        return None
    if _ok(ttft50) and lag99 < CLIENT_LAG_SHARE_OF_TTFT * ttft50:
        return None
    lag50, lagmax = _num(m, "schedule_lag_p50_ms"), _num(m, "schedule_lag_max_ms")
    evidence = [f"the client sent requests late: schedule lag p99 {_ms(lag99)} (median {_ms(lag50)}, "
                f"max {_ms(lagmax)})"
                + (f", more than the median TTFT of {_ms(ttft50)}" if _ok(ttft50) else "")]
    client_ttft, server_ttft = _num(m, "ttft_mean_ms"), _num(m, "server_ttft_mean_ms")
    if _ok(client_ttft) and _ok(server_ttft) and client_ttft > server_ttft:
        evidence.append(f"it also read responses late: its TTFT mean {_ms(client_ttft)} against the "
                        f"server's own {_ms(server_ttft)}")
    return Diagnosis(
        "client_bound",
        "The load generator could not keep to its schedule: requests went out late and its timings "
        "include its own delays, so this trial measured the client as much as the server.",
        evidence=evidence,
        next_steps=["give the client its own CPU core (taskset) and never share it with the vLLM worker",
                    "use the uvloop event loop / the lighter client for high request rates",
                    "or lower the request rate, and re-measure before trusting this trial"])


def _preemption(m, config, facts: ServingFacts, workload) -> Diagnosis | None:
    pre = _num(m, "server_preemptions")
    done = _num(m, "completed")
    if not _ok(pre) or pre < 1:
        return None
    per_req = pre / max(done, 1.0) if _ok(done) else math.inf
    if per_req < PREEMPTIONS_PER_REQUEST:
        return None
    kv = _num(m, "server_kv_cache_usage_peak")
    evidence = [f"{pre:.0f} preemptions for {done:.0f} completed requests ({per_req:.2f} per request)"
                + (f"; KV cache usage peaked at {kv:.0%}" if _ok(kv) else "")]
    steps = []
    if facts.has_flag("--swap-space"):
        steps.append("raise swap_space (seed 000 tree: frequent preemption -> larger swap-space, at least 4 GB)")
    else:
        steps.append("the seeds say raise swap-space; V1 has none (removed in 0.18: a preempted "
                     "request is recomputed), so give the KV cache more room instead:")
    util = config.get("memory_utilization")
    steps.append(f"raise memory_utilization{f' (now {util:g})' if util is not None else ''}: more KV blocks")
    mns = _effective_max_num_seqs(config, facts)
    steps.append(f"lower max_num_seqs{f' (now {mns})' if mns else ''} or cap max_num_active_seqs, so "
                 "fewer sequences grow in the cache at once")
    steps.append("raise watermark (e.g. 0.05-0.1) to keep blocks free at admission for running requests")
    if facts.is_gpu:
        steps.append("an fp8 kv_cache_dtype halves KV per token (seed 001: KV quantization)")
    return Diagnosis("preemption", "The KV cache ran full and running requests were preempted "
                     "(recomputed from scratch).", evidence=evidence, next_steps=steps)


def _queueing(m, config, facts: ServingFacts) -> Diagnosis | None:
    queue = _num(m, "server_queue_time_mean_ms")
    sttft = _num(m, "server_ttft_mean_ms")
    waiting_peak = _num(m, "server_waiting_peak")
    waiting_mean = _num(m, "server_waiting_mean")
    if _ok(queue) and _ok(sttft) and sttft > 0:
        if queue < QUEUE_TIME_FLOOR_MS or queue < QUEUE_SHARE_OF_TTFT * sttft:
            return None
        if _ok(waiting_peak) and waiting_peak < 1:
            return None
        share = queue / sttft
    elif _ok(waiting_mean) and waiting_mean >= 1:  # no queue-time histogram: the gauge alone
        share = math.nan
    else:
        return None
    evidence = [f"requests waited {_ms(queue)} on average before being scheduled"
                + (f", {share:.0%} of the server's mean TTFT ({_ms(sttft)})" if _ok(share) else "")
                + (f"; up to {waiting_peak:.0f} waiting (mean {waiting_mean:.1f})" if _ok(waiting_peak) else "")]
    running = _num(m, "server_running_peak")
    mns = _effective_max_num_seqs(config, facts)
    kv = _num(m, "server_kv_cache_usage_peak")
    steps = []
    if _ok(running) and mns and running >= mns:
        evidence.append(f"the batch was full: {running:.0f} running = max_num_seqs {mns}")
        steps.append(f"raise max_num_seqs above {mns} (seed 000 tree: waiting queue backlog -> more max-num-seqs; or max_num_active_seqs "
                     "on vLLM >= 0.29, which needs no recompile)")
    elif _ok(kv) and kv >= KV_FULL:
        evidence.append(f"admission was held back by the KV cache ({kv:.0%} used), not by max_num_seqs")
        steps.append("raise memory_utilization: V1 admits a request only when its prompt fits in the KV cache")
    else:
        if _ok(running):
            evidence.append(f"the batch was not full ({running:.0f} running"
                            + (f" of max_num_seqs {mns}" if mns else "") + "): the engine itself is saturated")
        steps.append("the offered load exceeds this server's capacity: scale out (seed 000 tree: consider more capacity) "
                     "or lower the request rate")
        steps.append("raise max_num_batched_tokens for throughput (seed 002: low throughput)")
    if config.get("scheduler_delay_factor"):
        steps.append("scheduler_delay_factor does nothing on V1 (removed in 0.11; new requests are "
                     "admitted every step); the seeds' 'lower the delay factor' is already the V1 behaviour")
    return Diagnosis("queueing", "Requests spent most of their time to first token waiting in the "
                     "server's queue.", evidence=evidence, next_steps=steps)


def _ttft_high(m, violated, unloaded, key="ttft_p95_ms") -> tuple[bool, str]:
    ttft = _num(m, key)
    if any(_family(v) == "ttft" for v in violated):
        which = [v for v in violated if _family(v) == "ttft"]
        return True, f"TTFT SLO violated ({', '.join(which)})"
    ref = unloaded.get("ttft_median_ms")
    if ref and _ok(ttft) and ttft >= LATENCY_X_UNLOADED * ref:
        return True, f"TTFT p95 {_ms(ttft)} is {ttft / ref:.1f}x the idle server's median {_ms(ref)}"
    if _ok(ttft) and ttft > TTFT_HIGH_MS:
        return True, f"TTFT p95 {_ms(ttft)} > {_ms(TTFT_HIGH_MS)} (seed 000 tree: TTFT very high)"
    return False, ""


def _prefill_bound(m, config, workload, violated, unloaded, queueing: bool) -> Diagnosis | None:
    if queueing:
        return None
    high, why = _ttft_high(m, violated, unloaded)
    if not high:
        return None
    evidence = [why]
    queue = _num(m, "server_queue_time_mean_ms")
    sttft = _num(m, "server_ttft_mean_ms")
    if _ok(queue) and _ok(sttft):
        evidence.append(f"little of it was queueing: {_ms(queue)} of a {_ms(sttft)} server TTFT")
    if workload is not None and len(workload.classes) > 1:
        per = sorted(((c.longest_prompt_tokens(workload.endpoint), c.name,
                       _num(m, f"ttft_p95_ms@{c.name}")) for c in workload.classes), reverse=True)
        evidence.append("TTFT p95 by class (longest prompt first): " + ", ".join(
            f"{name} {_ms(t)} (prompts <= {n} tokens)" for n, name, t in per if _ok(t)))
    chunked = config.get("enable_chunked_prefill", True) is not False
    mnbt = config.get("max_num_batched_tokens")
    steps = []
    if not chunked:
        steps.append("enable_chunked_prefill: long prompts then share steps with decodes (seed 002)")
    if workload is not None:
        longest = _longest_prompt(workload)
        if mnbt and chunked and longest > mnbt:
            steps.append(f"raise max_num_batched_tokens (now {mnbt}): the longest prompt ({longest} tokens) "
                         f"needs {math.ceil(longest / mnbt)} steps to prefill")
    lpt = config.get("long_prefill_token_threshold") or 0
    if lpt > 0:
        steps.append(f"lower long_prefill_token_threshold (now {lpt}) so long prompts take less of each "
                     "step and short requests get their first token sooner")
    else:
        steps.append("set long_prefill_token_threshold (e.g. 256-1024) so a long prompt cannot take a "
                     "whole step and short requests get their first token sooner")
    if _has_shared_prefix(workload) and config.get("enable_prefix_caching") is False:
        steps.append("enable_prefix_caching: the workload shares prompt prefixes (seed 001: free performance)")
    steps.append("the seeds' first answer, lower scheduler_delay_factor, has no V1 knob: V1 already "
                 "admits prefills every step")
    return Diagnosis("prefill_bound", "Time to first token is high and it is spent computing prompts, "
                     "not waiting for a slot.", evidence=evidence, next_steps=steps)


def _decode_bound(m, config, violated, unloaded, facts: ServingFacts) -> Diagnosis | None:
    tpot = _num(m, "tpot_p95_ms")
    why = ""
    if any(_family(v) in ("tpot", "itl") for v in violated):
        why = "TPOT/ITL SLO violated (" + ", ".join(v for v in violated if _family(v) in ("tpot", "itl")) + ")"
    else:
        ref = unloaded.get("tpot_median_ms")
        if ref and _ok(tpot) and tpot >= LATENCY_X_UNLOADED * ref:
            why = f"TPOT p95 {_ms(tpot)} is {tpot / ref:.1f}x the idle server's median {_ms(ref)}"
    if not why:
        return None
    evidence = [why]
    running = _num(m, "server_running_peak")
    if _ok(running):
        evidence.append(f"up to {running:.0f} sequences decoded together (mean {_num(m, 'server_running_mean'):.1f})")
    itl50, itl99 = _num(m, "itl_median_ms"), _num(m, "itl_p99_ms")
    stalled = _ok(itl50) and _ok(itl99) and itl50 > 0 and itl99 >= ITL_STALL_RATIO * itl50
    if stalled:
        evidence.append(f"inter-token gaps p99 {_ms(itl99)} vs median {_ms(itl50)}: decode steps "
                        "stall behind prefill chunks")
    mns = _effective_max_num_seqs(config, facts)
    steps = [f"lower max_num_seqs{f' (now {mns})' if mns else ''} or max_num_active_seqs: fewer "
             "sequences per step, each step faster (seed 002: high latency -> smaller max-num-seqs)"]
    if stalled:
        steps.append("lower max_num_batched_tokens or set long_prefill_token_threshold, so prefill "
                     "chunks take less of each decode step")
    ref = unloaded.get("tpot_median_ms")
    if ref:
        steps.append(f"if even the idle TPOT ({_ms(ref)}) is too slow, it is the model or its precision, "
                     "not scheduling (seed 000 tree: a model/quantization problem, not scheduling)")
    return Diagnosis("decode_bound", "Generating each token is slow: decode steps carry too many "
                     "sequences or too much prefill.", evidence=evidence, next_steps=steps)


def _healthy(m, config, facts: ServingFacts, violated) -> Diagnosis:
    evidence = []
    queue, pre = _num(m, "server_queue_time_mean_ms"), _num(m, "server_preemptions")
    if _ok(queue):
        evidence.append(f"queue time mean {_ms(queue)}")
    if _ok(pre):
        evidence.append(f"{pre:.0f} preemptions")
    lag = _num(m, "schedule_lag_p99_ms")
    if _ok(lag):
        evidence.append(f"client schedule lag p99 {_ms(lag)}")
    steps = []
    running, kv = _num(m, "server_running_peak"), _num(m, "server_kv_cache_usage_peak")
    mns = _effective_max_num_seqs(config, facts)
    if _ok(running) and mns and running < BATCH_HALF * mns:
        steps.append(f"the batch never got half full ({running:.0f} of {mns}): this config has headroom "
                     "for more load; max_num_seqs is not what limits it")
    if _ok(kv) and kv < BATCH_HALF:
        steps.append(f"the KV cache peaked at {kv:.0%}: memory_utilization could be lower without cost "
                     "at this load")
    if violated:
        steps.append("an SLO is violated without a dominant server symptom: compare per-class metrics")
    headline = ("No bottleneck crossed its threshold." if not violated else
                "No single bottleneck crossed its threshold.")
    return Diagnosis("healthy", headline, evidence=evidence, next_steps=steps)


def _side_notes(m, config, workload) -> list[str]:
    notes = []
    if _has_shared_prefix(workload):
        if config.get("enable_prefix_caching") is False:
            notes.append("prefix caching is off although the workload shares prompt prefixes "
                         "(seed 001: free performance)")
        else:
            hit = _num(m, "server_prefix_cache_hit_rate")
            if _ok(hit):
                notes.append(f"prefix cache hit rate {hit:.0%} of prompt tokens")
    lag = _num(m, "schedule_lag_p99_ms")
    if _num(m, "client_behind") >= 1 and not (_ok(lag) and lag > CLIENT_LAG_SHARE_OF_TTFT * _num(m, "ttft_median_ms")):
        notes.append(f"the load generator flagged schedule lag (p99 {_ms(lag)}), small next to the "
                     "latencies measured: the results stand")
    return notes


# --- anti-patterns -------------------------------------------------------------------------

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
        if metrics is not None and _ok(_num(metrics, "server_running_peak")):
            need = _num(metrics, "server_running_peak") + max(_num(metrics, "server_waiting_peak"), 0)
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
        mean_req = _mean_request_tokens(workload)
        width = _effective_max_num_seqs(config, facts)
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
            longest_prompt = _longest_prompt(workload)
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

    if config.get("enable_prefix_caching") is False and _has_shared_prefix(workload):
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


# --- what the study calls ------------------------------------------------------------------

def diagnose_trial(metrics: dict[str, Any], config: dict[str, Any], workload: WorkloadSpec | None,
                   failure_class: str | None = None, *, failure_phase: str | None = None,
                   failure_line: str | None = None, constraints: dict[str, float] | None = None,
                   unloaded: dict[str, float] | None = None, ctx: Any = None) -> dict[str, Any]:
    """Diagnosis and anti-patterns of one trial, as the JSON stored in `autotune_trials.diagnosis`.

    `ctx`: the study's `LaunchContext` (which flags the installed vLLM has, CPU or GPU, the KV
    budget); without it the checks assume a current V1 vLLM and skip hardware-specific ones.
    """
    facts = ServingFacts.from_context(ctx) if ctx is not None else ServingFacts()
    d = diagnose(metrics, config, workload, constraints=constraints, failure_class=failure_class,
                 failure_phase=failure_phase, failure_line=failure_line, unloaded=unloaded, facts=facts)
    d.findings = antipatterns(config, workload, facts=facts,
                              metrics=metrics if d.bottleneck != "startup_failure" else None)
    return d.as_dict()


def summarize(diagnoses: Iterable[dict[str, Any]]) -> dict[str, int]:
    """How many trials each bottleneck limited, in tree order."""
    counts = dict.fromkeys(BOTTLENECKS, 0)
    for d in diagnoses:
        if d:
            counts[d["bottleneck"]] = counts.get(d["bottleneck"], 0) + 1
    return {k: v for k, v in counts.items() if v}
