"""One point of the parity grid (`benchmarks.bench_load_parity`): the same requests, at the same
due times, sent by each tool in turn against one server; per run the metrics, the CPU each tool
and each server process took, the server's histograms and what other processes took meanwhile.
"""

from __future__ import annotations

import asyncio
import math
import os
from dataclasses import dataclass

import numpy as np
import yaml
from rich.console import Console

from benchmarks.cpu_watch import ForeignCpu, TreeCpu, cpu_in_window, wait_for_quiet
from benchmarks.load_runs import (
    run_ours,
    run_vllm_bench,
    vllm_bench_prepared_args,
    vllm_schedule_lag_ms,
    write_prepared_requests,
)
from loadgen import (
    AVOID_ENGINE_CPUS_ENV,
    MetricsSnapshot,
    PromptTokenizer,
    ServerTokenCounter,
    WorkloadSpec,
    cached_requests,
    engine_pinned_cpus,
    open_loop_offsets,
)
from vllm_http import fetch_metrics_text

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
# `vllm bench serve` as users run it (anywhere), or on the CPUs our client keeps to.
VLLM = ("vllm", "vllm-offengine")
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
    async def fetch() -> str | None:
        import aiohttp

        async with aiohttp.ClientSession() as session:
            return await fetch_metrics_text(session, url, timeout_s=10)

    text = asyncio.run(fetch())
    return MetricsSnapshot.parse(text) if text is not None else None


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


def run_point(point: Point, args, ctx, model: str, url: str, server_pid: int, console: Console) -> list[dict]:
    """Every tool's runs of `point`, alternating (the order rotates every repetition); a run
    disturbed by other processes is run again and the least disturbed kept."""
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
    return rows
