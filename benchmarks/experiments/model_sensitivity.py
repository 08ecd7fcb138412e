"""Do scheduling knobs visibly move TTFT and throughput on the default model?

Same closed-loop workload (256-token prompts, 64-token outputs, 32 users, 96 requests) against
servers that differ in one knob: vLLM's CPU defaults (max-num-seqs 128, max-num-batched-tokens
2048), a small prefill budget (512), a narrow batch (max-num-seqs 8). Runs are interleaved and
repeated; the table shows medians over repeats.

    .venv/bin/python -m benchmarks.experiments.model_sensitivity [--repeats 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from loadgen import LoadOptions, WorkloadSpec, run_load_sync
from serving import launch_context, resolve_server_args
from serving.process import launch

CONFIGS = {
    "vLLM CPU defaults": {},
    "max-num-batched-tokens 512": {"max_num_batched_tokens": 512},
    "max-num-seqs 8": {"max_num_seqs": 8},
}
WORKLOAD = WorkloadSpec.model_validate(
    {
        "endpoint": "completions",
        "seed": 1,
        "num_requests": 96,
        "warmup_requests": 8,
        "arrival": {"mode": "closed", "concurrency": 32},
        "prompt_tokens": 256,
        "output_tokens": 64,
    }
)
KEYS = ["ttft_median_ms", "ttft_p99_ms", "tpot_median_ms", "itl_p99_ms", "output_throughput"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    n = ap.parse_args().repeats
    ctx = launch_context()
    logs = Path(tempfile.mkdtemp(prefix="autotune-sensitivity-"))
    results: dict[str, list[dict]] = {name: [] for name in CONFIGS}
    starts: dict[str, list[float]] = {name: [] for name in CONFIGS}
    for i in range(n):
        for k, (name, knobs) in enumerate(CONFIGS.items()):
            values = {
                "dtype": ctx.dtype,
                "enforce_eager": True,
                "max_model_len": 2048,
                "memory_utilization": 0.5,
                **knobs,
            }
            args = resolve_server_args(values, ctx)
            with launch(ctx, args, logs / f"{i}-{k}.log") as server:
                starts[name].append(server.ready_s)
                options = LoadOptions(tokenizer_path=ctx.model.path)
                flat = run_load_sync(server.base_url, None, WORKLOAD, options=options).flat()
            results[name].append(flat)
            print(f"run {i + 1}/{n} {name}: " + ", ".join(f"{key} {flat[key]:.1f}" for key in KEYS), flush=True)
    table = Table(
        title=f"default model ({ctx.model.path.name}) on {ctx.hardware.describe()}, "
        f"median of {n}; closed loop 32 users, 256 in / 64 out"
    )
    table.add_column("server")
    for key in [*KEYS, "start s"]:
        table.add_column(key, justify="right")
    for name, runs in results.items():
        row = [f"{statistics.median(r[key] for r in runs):.1f}" for key in KEYS]
        table.add_row(name, *row, f"{statistics.median(starts[name]):.1f}")
    Console().print(table)


if __name__ == "__main__":
    main()
