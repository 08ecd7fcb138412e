"""`autotune scenario from-trace`: a scenario made from a request log, and what the log holds.

The workload replays the trace (`workload.trace`, arrivals `mode: trace` at a fraction of the
measured capacity, lengths clipped to the context); everything else comes from the shipped
scenario whose traffic is closest to the trace's (`closest`): its search space, baselines,
server settings, capacity search, confirmation and budget, and its SLOs and objectives with
their request class dropped (a trace is one class unless its JSONL names classes). SLOs stay
relative to the unloaded latencies the study measures (`x_unloaded`), so the file means the
same on the CPU model as on a GPU; a TTFT tail bound grows by the trace's prompt tail over its
median (`prompt_tail_ratio`), which one trace class carries in its tail. `--objective` replaces
the objectives and the selection:
`latency`: the best TTFT tail, and among configs within 10 % of it the highest capacity;
`throughput`: the highest capacity, and among configs within 10 % of it the best TTFT tail;
`balanced`: the knee of the front.

A trace of multi-turn sessions makes a `sessions:` workload instead (`search.session_scenario`,
which builds on this module and tells the two apart: `scenario_from_trace`).

Closeness: |log ratio| of the mean prompt and output lengths, half the difference of the
inter-arrival CVs and the difference of the prompt-token shares that are shared; only
open-loop scenarios qualify (a trace is an open loop).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from loadgen import MetricName, Trace, TraceError, TrafficStats, read_trace, shared_tokens_from_segments, traffic_stats
from loadgen import clipped as clip_trace
from objectives.capacity import SLO_CAPACITY_RPS
from search import scenario as scenario_mod

OBJECTIVES = ("latency", "throughput", "balanced")
DEFAULT_CONTEXT = 4096  # when the closest scenario fixes no max_model_len
DEFAULT_CAPACITY_FRACTION = 0.5
_COPIED = (
    "goodput",
    "capacity",
    "screening",
    "confirmation",
    "calibration",
    "search_space",
    "server",
    "baselines",
    "default_trials",
    "default_sampler",
)
_WORKLOAD_COPIED = ("seed", "duration_s", "warmup_requests", "request_timeout_s")


@dataclass(frozen=True)
class Findings:
    """What a trace holds, and where a scenario for it starts from."""

    trace: Trace
    stats: TrafficStats
    context: int
    clipped: int
    closest: str
    distances: dict[str, float]


def _features(stats: TrafficStats) -> tuple[float, float, float, float]:
    share = stats.shared_token_share
    return (
        stats.prompt_tokens["mean"],
        stats.output_tokens["mean"],
        stats.interarrival_cv,
        0.0 if math.isnan(share) else share,
    )


def _scenario_features(sc: scenario_mod.Scenario) -> tuple[float, float, float, float] | None:
    wl = sc.workload
    arrival = wl.arrival
    if arrival.mode == "closed" or any(c.prompt_tokens is None or c.output_tokens is None for c in wl.classes):
        return None
    rng = np.random.default_rng(0)
    weights = np.array([c.weight for c in wl.classes]) / sum(c.weight for c in wl.classes)
    lengths = [(c.prompt_tokens, c.output_tokens) for c in wl.classes]
    prompt = sum(w * p.sample(rng, 4000).mean() for w, (p, _) in zip(weights, lengths) if p is not None)
    output = sum(w * o.sample(rng, 4000).mean() for w, (_, o) in zip(weights, lengths) if o is not None)
    shared = sum(
        w * c.shared_prefix.fraction * c.shared_prefix.tokens for w, c in zip(weights, wl.classes) if c.shared_prefix
    )
    cv = {"poisson": 1.0, "constant": 0.0, "gamma": 1 / math.sqrt(arrival.burstiness)}.get(arrival.mode, 1.5)
    return float(prompt), float(output), cv, float(shared / prompt)


def distance(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    cv_a = 1.0 if math.isnan(a[2]) else a[2]
    return abs(math.log(a[0] / b[0])) + abs(math.log(a[1] / b[1])) + 0.5 * abs(cv_a - b[2]) + abs(a[3] - b[3])


def shipped_scenarios() -> dict[str, scenario_mod.Scenario]:
    out = {}
    for path in sorted(scenario_mod.CONFIG_DIR.glob("*.yaml")):
        out[path.stem] = scenario_mod.load(path)[0]
    return out


def closest(stats: TrafficStats, shipped: dict[str, scenario_mod.Scenario]) -> tuple[str, dict[str, float]]:
    mine = _features(stats)
    dist = {}
    for name, sc in shipped.items():
        feats = _scenario_features(sc)
        if feats is not None:
            dist[name] = distance(mine, feats)
    if not dist:
        raise scenario_mod.ScenarioError("no shipped open-loop scenario to start from")
    return min(dist, key=dist.__getitem__), dict(sorted(dist.items(), key=lambda kv: kv[1]))


def find(path: Path, fmt: str = "auto", context: int | None = None) -> tuple[Findings, dict[str, Any]]:
    """The trace's findings and the closest shipped scenario's source mapping."""
    try:
        trace = read_trace(path, fmt)
    except TraceError as e:
        raise scenario_mod.ScenarioError(str(e)) from None
    shared = shared_tokens_from_segments(trace.segments, trace.prompt_tokens) if trace.segments else None
    stats = traffic_stats(trace.arrival_s, trace.prompt_tokens, trace.output_tokens, shared)
    shipped = shipped_scenarios()
    name, dist = closest(stats, shipped)
    source = scenario_mod.read_mapping((scenario_mod.CONFIG_DIR / f"{name}.yaml").read_text(), name)
    fixed = (source.get("server") or {}).get("fixed") or {}
    context = context or int(fixed.get("max_model_len") or DEFAULT_CONTEXT)
    _, n_clipped = clip_trace(trace, context)
    return Findings(trace, stats, context, n_clipped, name, dist), source


def _unclassed(metric: str) -> str:
    return MetricName.parse(metric).base


def _objectives(
    source: dict[str, Any], objective: str | None, keep_class: bool = False
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The objectives and selection: the source's (its metrics unclassed unless `keep_class`:
    a sessions workload keeps the turn classes its metrics name) or those of `objective`."""
    slos = source.get("slos") or []
    ttft = next((_unclassed(s["metric"]) for s in slos if _unclassed(s["metric"]).startswith("ttft_")), "ttft_p95_ms")
    if keep_class:
        ttft = next((s["metric"] for s in slos if _unclassed(s["metric"]).startswith("ttft_")), ttft)
        if objective is None:
            return list(source["objectives"]), dict(source.get("selection") or {})
    if objective is None:
        objs = [{**o, "metric": _unclassed(o["metric"])} for o in source["objectives"]]
        sel = dict(source.get("selection") or {})
        for key in ("metric", "then"):
            if sel.get(key):
                sel[key] = _unclassed(sel[key])
        return objs, sel
    capacity = {"metric": SLO_CAPACITY_RPS, "direction": "maximize"}
    latency = {"metric": ttft, "direction": "minimize"}
    if objective == "latency":
        return [latency, capacity], {"rule": "best_of", "metric": ttft, "tolerance": 0.1, "then": SLO_CAPACITY_RPS}
    if objective == "throughput":
        return [capacity, latency], {"rule": "best_of", "metric": SLO_CAPACITY_RPS, "tolerance": 0.1, "then": ttft}
    return [latency, capacity], {"rule": "knee"}


def prompt_tail_ratio(stats: TrafficStats, quantile: float) -> float:
    """The trace's prompt length at `quantile` (its p90 or p99, whichever is at or above it) over
    its median, at least 1. A relative bound multiplies the unloaded *median*, which a median
    prompt pays; prefill grows about linearly with the prompt, so an idle server's TTFT at that
    quantile is about this many times its median."""
    key = "p90" if quantile <= 0.9 else "p99"
    tail, median = stats.prompt_tokens.get(key, math.nan), stats.prompt_tokens.get("p50", math.nan)
    if not (tail > 0 and median > 0):
        return 1.0
    return max(1.0, tail / median)


def _scaled(bound: Any, ratio: float) -> Any:
    if isinstance(bound, dict) and "x_unloaded" in bound and ratio > 1.0:
        return {"x_unloaded": math.ceil(bound["x_unloaded"] * ratio)}
    return bound


def _slos(source: dict[str, Any], stats: TrafficStats) -> list[dict[str, Any]]:
    """The shipped scenario's SLOs, unclassed; a relative TTFT tail bound is taken over the
    trace's own length tail (`prompt_tail_ratio`), so that an idle server meets it: a shipped
    scenario's classes keep a long prompt out of the short class's tail, one trace class does not."""
    out: dict[str, dict[str, Any]] = {}
    for s in source.get("slos") or []:
        metric = _unclassed(s["metric"])
        name = MetricName.parse(metric)
        slo = {**s, "metric": metric}
        if name.family == "ttft" and name.quantile is not None and "max" in slo:
            slo["max"] = _scaled(slo["max"], prompt_tail_ratio(stats, name.quantile))
        out.setdefault(metric, slo)
    return list(out.values())


def _goodput(source: dict[str, Any], stats: TrafficStats) -> dict[str, Any] | None:
    """The shipped scenario's per-request goodput bounds, its TTFT bound over the trace's p99
    prompt (as `_slos`): a request counts as good if an idle server could have served it so."""
    goodput = source.get("goodput")
    if not goodput:
        return goodput
    out = dict(goodput)
    if "ttft_ms" in out:
        out["ttft_ms"] = _scaled(out["ttft_ms"], prompt_tail_ratio(stats, 0.99))
    return out


def slo_lines(slos: list[dict[str, Any]], stats: TrafficStats) -> list[str]:
    """What the scaling of the TTFT bounds did, for the scenario file's head."""
    lines = []
    for slo in slos:
        name = MetricName.parse(slo["metric"])
        if name.family == "ttft" and name.quantile is not None:
            ratio = prompt_tail_ratio(stats, name.quantile)
            if ratio > 1.0 and isinstance(slo.get("max"), dict):
                lines.append(
                    f"{slo['metric']} <= {slo['max']['x_unloaded']}x the unloaded median: the shipped "
                    f"scenario's multiple times the prompt tail's {ratio:.1f}x the median prompt"
                )
    return lines


def scenario_name(path: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", path.stem).strip("-.") or "trace"
    return name if scenario_mod.is_safe_name(name) else f"trace-{name}"


def build(path: Path, out: Path, objective: str | None = None, context: int | None = None) -> tuple[str, Findings]:
    """(the scenario's YAML text, the findings). The text is validated as `make search` will read it."""
    if objective is not None and objective not in OBJECTIVES:
        raise scenario_mod.ScenarioError(f"--objective: {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    found, source = find(path, context=context)
    src_wl = source.get("workload") or {}
    arrival = src_wl.get("arrival") or {}
    # The absolute path: a stored study's readers (the report, workers) read the scenario away from
    # its directory (a path written by hand is relative to the scenario file).
    trace_section: dict[str, Any] = {"file": str(path.resolve()), "format": found.trace.format}
    if int((found.trace.prompt_tokens + found.trace.output_tokens).max()) > found.context:
        trace_section["max_total_tokens"] = found.context
    workload: dict[str, Any] = {"endpoint": "completions"}
    workload.update({k: src_wl[k] for k in _WORKLOAD_COPIED if k in src_wl})
    workload.setdefault("duration_s", 45)
    workload["trace"] = trace_section
    workload["arrival"] = {
        "mode": "trace",
        "capacity_fraction": arrival.get("capacity_fraction", DEFAULT_CAPACITY_FRACTION),
    }
    objectives, selection = _objectives(source, objective)
    data: dict[str, Any] = {
        "name": scenario_name(path),
        "title": f"Replay of {path.name}",
        "source": f"autotune scenario from-trace {path.name}; settings of the shipped scenario {found.closest}",
        "description": summary_line(found),
        "workload": workload,
        "objectives": objectives,
        "slos": _slos(source, found.stats),
        "selection": selection,
    }
    data.update({k: source[k] for k in _COPIED if k in source})
    if data.get("goodput"):
        data["goodput"] = _goodput(source, found.stats)
    header = [*findings_lines(found), *slo_lines(data["slos"], found.stats)]
    return scenario_text(data, found.context, header, out), found


def scenario_text(data: dict[str, Any], context: int, header: list[str], out: Path) -> str:
    """The scenario file from-trace writes: `header` as comments, then `data` with the model's
    context fixed for every server; validated as `make search` will read it."""
    server = dict(data.get("server") or {})
    server["fixed"] = {**(server.get("fixed") or {}), "max_model_len": context}
    data["server"] = server
    text = "".join(f"# {line}\n" for line in header)
    text += "\n" + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
    scenario_mod.parse(text, str(out), out.resolve().parent)  # what make search will read
    return text


def summary_line(f: Findings) -> str:
    s = f.stats
    return (
        f"{s.requests} requests over {s.span_s / 3600:.1f} h of {f.trace.source.rsplit('/', 1)[-1]}, replayed with "
        f"their own gaps (inter-arrival CV {s.interarrival_cv:.2f}) at a fraction of the measured capacity; "
        f"prompts median {s.prompt_tokens['p50']:.0f} tokens, outputs median {s.output_tokens['p50']:.0f}."
    )


_BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float]) -> str:
    top = max(values, default=0.0)
    if top <= 0:
        return ""
    return "".join(_BARS[min(len(_BARS) - 1, int(v / top * (len(_BARS) - 1) + 0.5))] for v in values)


def findings_lines(f: Findings) -> list[str]:
    """What `from-trace` prints, and heads the scenario file with."""
    s = f.stats
    rates = [r for _, r in s.rate_bins]
    width = s.rate_bins[1][0] - s.rate_bins[0][0] if len(s.rate_bins) > 1 else s.span_s

    def q(d: dict[str, float]) -> str:
        return ", ".join(f"{k} {v:,.0f}" for k, v in d.items())

    if math.isnan(s.shared_token_share):
        sharing = "not recorded in the file (no prefix_id or hash_ids)"
    else:
        sharing = (
            f"{s.shared_request_share:.0%} of requests start with a prefix an earlier one sent; "
            f"{s.shared_token_share:.0%} of prompt tokens are shared"
        )
    notes = [f"note: {n}" for n in f.trace.notes]
    return [
        f"{Path(f.trace.source).name}: {s.requests:,} requests over {s.span_s / 3600:.2f} h ({f.trace.format} format)",
        f"rate over time ({_duration(width)} bins, req/s): {sparkline(rates)}  "
        f"min {min(rates, default=0):.3g}, mean {s.mean_rate:.3g}, max {max(rates, default=0):.3g}",
        f"burstiness: inter-arrival CV {s.interarrival_cv:.2f} (Poisson: 1.00); busiest bin {s.peak_to_mean:.1f}x the mean",
        f"prompt tokens: {q(s.prompt_tokens)}",
        f"output tokens: {q(s.output_tokens)}",
        f"prefix sharing: {sharing}",
        f"clipped to the context ({f.context} tokens, prompt + output): {f.clipped} requests "
        f"({f.clipped / max(s.requests, 1):.1%})",
        "closest shipped scenario: "
        + ", ".join(f"{name} {d:.2f}" for name, d in f.distances.items())
        + f" (distance; settings from {f.closest})",
        *notes,
    ]


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 60:
        return f"{seconds / 60:.3g} min"
    return f"{seconds:.3g} s"
