"""The replay's statistics table: what a trace's window holds against what the server received.

For a scenario that replays a trace (`autotune scenario from-trace`), each measured stage
replays a window of the trace at the stage's rate. This compares, with one arithmetic
(`loadgen.traffic_stats`), the window the stage planned (the trace's rows, their gaps scaled to
the rate) with the requests the server received: their send times, the output tokens its usage
reported, the prompt lengths (per request from `autotune load --records`, whose `prompt_tokens` is
the server's usage count; from a stored study, the built lengths, which the stage's notes say
the server counted differently for any request), its /metrics prompt and generation token
totals, and its prefix cache hit rate against the share of prompt tokens the window shares
(in whole blocks of `--block` tokens: vLLM's CPU build uses 128, GPUs 16).

Targets: mean rate within 2 %, inter-arrival CV within 5 %, length quantiles within 1 token,
prefix-sharing share within 2 points.

    .venv/bin/python -m benchmarks.bench_trace_replay runs/trace/mine.yaml --storage sqlite:///runs/autotune.db --study azure-synthetic
    .venv/bin/python -m benchmarks.bench_trace_replay runs/trace/mine.yaml --load runs/trace/replay.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadgen import (
    TrafficStats,
    WorkloadSpec,
    replay_offsets,
    shared_tokens_from_segments,
    traffic_stats,
    warmup_rows,
    window_rows,
    window_start,
)

RATE_TOLERANCE = 0.02
CV_TOLERANCE = 0.05
TOKEN_TOLERANCE = 1.0
SHARE_TOLERANCE = 0.02
CPU_BLOCK = 128


@dataclass(frozen=True)
class Stage:
    """What a measured stage received: send times (s), lengths per request, the server's counters."""

    rate: float
    planned: int
    sent_s: np.ndarray
    prompt_tokens: np.ndarray | None  # None: not known per request (the built lengths are used)
    output_tokens: np.ndarray
    server: dict[str, float]
    warmup: int
    notes: tuple[str, ...] = ()


def planned(wl: WorkloadSpec, stage: Stage, block: int) -> tuple[TrafficStats, np.ndarray, float, np.ndarray]:
    """(the window's statistics, its rows, its shared-token share at `block`, its prompt lengths)."""
    trace = wl.replayed_trace()
    assert trace is not None, "the workload replays no trace"
    rows = window_rows(len(trace), window_start(len(trace), wl.seed), 0, stage.planned)
    offsets = replay_offsets(trace, wl.seed, stage.planned, stage.rate)
    prompts = trace.prompt_tokens[rows]
    share = 0.0
    if trace.segments is not None:
        # The warm-up's rows (sent before the measured window, on the first stage) are history.
        history = warmup_rows(len(trace), window_start(len(trace), wl.seed), 0, stage.warmup)[::-1]
        all_rows = np.concatenate([history, rows])
        shared = shared_tokens_from_segments(
            [trace.segments[i] for i in all_rows], trace.prompt_tokens[all_rows], block
        )
        share = float(shared[len(history) :].sum() / prompts.sum())
    stats = traffic_stats(offsets, prompts, trace.output_tokens[rows])
    return stats, rows, share, prompts


def received(stage: Stage, built_prompts: np.ndarray) -> TrafficStats:
    n = len(stage.sent_s)
    prompts = stage.prompt_tokens if stage.prompt_tokens is not None else built_prompts[:n]
    return traffic_stats(np.sort(stage.sent_s), prompts, stage.output_tokens)


def _rel(a: float, b: float) -> float:
    return (b - a) / a if a else math.nan


def compare(source: TrafficStats, got: TrafficStats, share: float, server_share: float) -> list[tuple]:
    """(statistic, source, received, difference text, within target) rows."""
    rows: list[tuple] = [("requests", source.requests, got.requests, f"{got.requests - source.requests:+d}", None)]
    d = _rel(source.mean_rate, got.mean_rate)
    rows.append(("mean rate (req/s)", source.mean_rate, got.mean_rate, f"{d:+.2%}", abs(d) <= RATE_TOLERANCE))
    d = _rel(source.interarrival_cv, got.interarrival_cv)
    rows.append(("inter-arrival CV", source.interarrival_cv, got.interarrival_cv, f"{d:+.2%}", abs(d) <= CV_TOLERANCE))
    for name, a, b in (
        ("prompt", source.prompt_tokens, got.prompt_tokens),
        ("output", source.output_tokens, got.output_tokens),
    ):
        for key in ("p10", "p50", "p90", "p99", "max"):
            diff = b[key] - a[key]
            rows.append((f"{name} tokens {key}", a[key], b[key], f"{diff:+.1f}", abs(diff) <= TOKEN_TOLERANCE))
    if not math.isnan(server_share):
        diff = server_share - share
        rows.append(
            (
                "prompt tokens shared (server: prefix cache hits)",
                share,
                server_share,
                f"{diff * 100:+.1f} pt",
                abs(diff) <= SHARE_TOLERANCE,
            )
        )
    return rows


def _server_share(server: dict[str, float]) -> float:
    q = server.get("prefix_cache_queries", server.get("server_prefix_cache_queries", math.nan))
    h = server.get("prefix_cache_hits", server.get("server_prefix_cache_hits", math.nan))
    return float(h) / float(q) if q and q == q and h == h else math.nan


def _server_total(server: dict[str, float], key: str) -> float:
    return float(server.get(key, server.get(f"server_{key}", math.nan)) or math.nan)


def table(wl: WorkloadSpec, stage: Stage, block: int) -> tuple[list[tuple], list[str]]:
    source, _, share, prompts = planned(wl, stage, block)
    got = received(stage, prompts)
    lines = []
    prompt_total = _server_total(stage.server, "prompt_tokens")
    if prompt_total == prompt_total:
        sent = int(prompts[: len(stage.sent_s)].sum())
        lines.append(f"prompt tokens, trace rows sent {sent:,} / server /metrics {prompt_total:,.0f}")
    gen_total = _server_total(stage.server, "generation_tokens")
    if gen_total == gen_total:
        lines.append(f"output tokens, usage {int(stage.output_tokens.sum()):,} / server /metrics {gen_total:,.0f}")
    lines += [f"note: {n}" for n in stage.notes]
    return compare(source, got, share, _server_share(stage.server)), lines


def stage_from_load_json(data: dict[str, Any]) -> Stage:
    recs = [r for r in data["records"] if not r["warmup"] and r["sent"] is not None]
    recs.sort(key=lambda r: r["index"])
    rate = float(data["target_rate"])
    wl = data["workload"]
    planned_n = math.floor(rate * wl["duration_s"] + 1e-9) if wl.get("num_requests") is None else wl["num_requests"]
    metrics = data.get("metrics", {})
    return Stage(
        rate,
        planned_n,
        np.array([r["sent"] for r in recs]),
        np.array([r["prompt_tokens"] if r["prompt_tokens"] is not None else r["expected_prompt_tokens"] for r in recs]),
        np.array([r["completion_tokens"] or 0 for r in recs]),
        {k: v for k, v in metrics.items() if k.startswith("server_") and v is not None},
        int(wl.get("warmup_requests", 0)),
        tuple(data.get("notes", [])),
    )


def stage_from_stored(stage: dict[str, Any], warmup: int) -> Stage:
    samples = stage.get("samples") or {}
    return Stage(
        float(stage["rate"]),
        int(stage["requests_planned"]),
        np.array(samples.get("sent_s", []), dtype=float),
        None,
        np.array([t or 0 for t in samples.get("output_tokens", [])]),
        {k: v for k, v in (stage.get("server_diagnostics") or {}).items() if v is not None},
        warmup if stage.get("stage_index", 0) == 0 else 0,
        tuple(stage.get("notes") or []),
    )


def stored_stages(storage: str, study: str) -> list[tuple[str, dict[str, Any]]]:
    """(label, target stage) of every confirmation run, else of every trial."""
    from sqlalchemy.orm import Session

    from storage import database, queries

    with Session(database.open_db(storage)) as session:
        rec = queries.require_study(session, study)
        runs = queries.confirmation_runs(session, rec)
        out = [(f"confirmation trial {r.trial_number} round {r.round}", r.stages[0]) for r in runs if r.stages]
        if not out:
            for t in queries.trial_records(session, rec):
                stages = sorted(t.stages, key=lambda s: s.stage_index)
                if stages:
                    s = stages[0]
                    cols = {c.name: getattr(s, c.name) for c in s.__table__.columns}
                    out.append((f"trial {t.trial_number}", cols))
    return out


def _fmt(x: Any) -> str:
    if isinstance(x, (int, np.integer)):
        return f"{x:,}"
    return f"{x:,.4g}" if isinstance(x, float) and abs(x) < 100 else f"{x:,.1f}"


def render(rows: list[tuple], title: str) -> str:
    out = [
        f"### {title}",
        "",
        "| statistic | trace window | received | difference | target met |",
        "|---|---:|---:|---:|:---:|",
    ]
    for name, a, b, diff, ok in rows:
        mark = "" if ok is None else ("yes" if ok else "NO")
        out.append(f"| {name} | {_fmt(a)} | {_fmt(b)} | {diff} | {mark} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    from search import scenario as scenario_mod

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", help="the scenario that replays the trace, or a workload YAML (a path)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--load", type=Path, help="`autotune load SCENARIO --json FILE --records` output")
    src.add_argument("--storage", help="the study's database URL (with --study)")
    p.add_argument("--study", help="the study's name")
    p.add_argument("--block", type=int, default=CPU_BLOCK, help="the server's KV block size (CPU 128, GPU 16)")
    args = p.parse_args(argv)
    try:
        data = scenario_mod.read_mapping(Path(args.scenario).read_text(), args.scenario)
        if "workload" in data:
            wl = scenario_mod.load(args.scenario)[0].workload
        else:
            wl = WorkloadSpec.model_validate(data, context={"base_dir": Path(args.scenario).parent.resolve()})
    except (OSError, ValueError) as e:
        print(f"bench_trace_replay.py: error: {e}", file=sys.stderr)
        return 2
    if wl.trace is None:
        print(f"bench_trace_replay.py: error: {args.scenario}: the workload replays no trace", file=sys.stderr)
        return 2
    if args.load is not None:
        stages = [("autotune load", stage_from_load_json(json.loads(args.load.read_text())))]
    else:
        if not args.study:
            print("bench_trace_replay.py: error: --storage needs --study", file=sys.stderr)
            return 2
        stages = [
            (label, stage_from_stored(s, wl.warmup_requests)) for label, s in stored_stages(args.storage, args.study)
        ]
    if not stages:
        print("bench_trace_replay.py: error: no measured stage with samples", file=sys.stderr)
        return 2
    summary = []
    for i, (label, stage) in enumerate(stages):
        rows, lines = table(wl, stage, args.block)
        missed = [r[0] for r in rows if r[4] is False]
        summary.append(f"{label}: {'all within target' if not missed else 'outside target: ' + ', '.join(missed)}")
        if i == 0:
            print(render(rows, f"{label}, {stage.rate:.3g} req/s, {len(stage.sent_s)} requests sent"))
            print("\n".join(f"- {x}" for x in lines))
            print()
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
