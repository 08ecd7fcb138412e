"""Where a start's seconds go, before and after, on one model: three starts, each followed by the
tuner's warm-up and a short fixed load, in this order:

1. `tuner, cold`: the tuner's own path (the study's zygote, vLLM forking its EngineCore, the
   tuner's plugin) on an empty cache: torch.compile, FlashInfer, Triton and vLLM's model
   inspection fill it; the zygote imports vLLM here, once;
2. `before`: exec'd and unmodified (LEAN_ENTRY: vLLM as it is, its EngineCore spawned, no
   plugin), on the cache the first start filled: the tuner's start as it was;
3. `tuner, warm`: the tuner's path again, forked by the same zygote on the warm cache: every
   later trial of a study.

Prints each start's anatomy (serving/start_anatomy.py) side by side with what the plugin said,
then the served TTFT and TPOT of each; writes starts.json and each server log under --out. On
the CPU build (the tiny built-in model, eager) it checks every step but the GPU's.

    python3 -m benchmarks.bench_start_anatomy --model DIR --out DIR [--cache DIR] [--values JSON]

(`make bench-start-anatomy` on this machine; benchmarks/gpu/start_anatomy.sh on a GPU lease.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.bench_startup import SERVED
from loadgen import LoadOptions, WorkloadSpec, run_async, run_load
from serving import START_PHASES, launch_context, process, resolve_server_args
from serving.process import FirstTokenWatch, ServerFailed, VllmServer, while_serving

# The short fixed load after each start: the same requests every time (one seed), about 10 s on an
# H100. Its two warm-up requests run side by side, so the "load warm-up" phase is about one
# request's latency plus the load generator's own preparation (tokenizer, request building).
FIXED_LOAD = {
    "endpoint": "completions",
    "prompt_tokens": 512,
    "output_tokens": 64,
    "arrival": {"mode": "poisson", "rate": 4.0},
    "num_requests": 40,
    "warmup_requests": 2,
    "seed": 7,
    "request_timeout_s": 120,
}
# (zygote, plugin, fork_engine, warm_children): serving/process/launch_spec.py
TUNER, BEFORE = (True, True, True, True), (False, False, False, False)
STARTS = (("tuner, cold", TUNER), ("before", BEFORE), ("tuner, warm", TUNER))


def one_start(ctx, values: dict, how: tuple, log: Path, timeout_s: float) -> dict:
    # process.launch_spec: the function (serving.process also has a module of that name)
    spec = process.launch_spec(ctx, resolve_server_args(values, ctx), log, startup_timeout_s=timeout_s)
    spec.zygote, spec.plugin, spec.fork_engine, spec.warm_children = how
    server = VllmServer(spec)
    t0 = time.monotonic()
    server.start()
    healthy_at = time.perf_counter()
    try:
        model, watch = str(ctx.model.path), FirstTokenWatch(60.0)
        options = LoadOptions(tokenizer_path=model, watch=watch)
        load = run_load(server.base_url, model, WorkloadSpec.model_validate(FIXED_LOAD), options=options)
        result = run_async(while_serving(server, load, "load", watch))
    finally:
        report = server.stop()
    after = [None if t is None else t - healthy_at for t in (watch.first_token_at(), watch.first_measured_at())]
    anatomy = report.start_anatomy.with_first_token(*after)
    metrics = result.flat_metrics()
    said = [
        x.split("autotune plugin: ", 1)[1]
        for x in log.read_text(errors="replace").splitlines()
        if "autotune plugin: " in x
    ]
    return {
        "start_s": server.ready_s,
        "to_first_measured_s": (after[1] or 0.0) + server.ready_s,
        "wall_s": time.monotonic() - t0,
        "phases": anatomy.phases,
        "vllm_reported": anatomy.reported,
        "cached_compile": anatomy.cached_compile,
        "forked_by_zygote": "forked by the study's zygote" in log.read_text(errors="replace")
        and "not forked" not in log.read_text(errors="replace"),
        "plugin_said": said,
        **{k: metrics[k] for k in SERVED},
    }


def show(runs: dict[str, dict]) -> None:
    table = Table(title="where each start's seconds went (s; - where its log had no line for it)")
    table.add_column("phase")
    for name in runs:
        table.add_column(name, justify="right")

    def cell(x) -> str:
        return "-" if x is None else f"{x:.1f}"

    for p in START_PHASES:
        table.add_row(p, *(cell(r["phases"].get(p)) for r in runs.values()))
    table.add_row("[bold]spawn to /health[/]", *(cell(r["start_s"]) for r in runs.values()))
    table.add_row("[bold]spawn to first measured request[/]", *(cell(r["to_first_measured_s"]) for r in runs.values()))
    for key in ("torch_compile_s", "compile_from_cache_s", "cuda_graphs_s", "engine_init_s"):
        table.add_row(f"vLLM: {key}", *(cell(r["vllm_reported"].get(key)) for r in runs.values()))
    table.add_row("forked by the zygote", *(str(r["forked_by_zygote"]) for r in runs.values()))
    for key in SERVED:
        table.add_row(key, *(cell(r[key]) for r in runs.values()))
    Console(width=160).print(table)
    for name, r in runs.items():
        for line in r["plugin_said"]:
            print(f"{name}: plugin: {line}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="the model's directory (default: the tuner's built-in model)")
    ap.add_argument("--out", type=Path, required=True, help="where starts.json and the server logs go")
    ap.add_argument("--cache", type=Path, help="the tuner's cache for these starts (default: a new, empty one)")
    ap.add_argument(
        "--values", default=None, help="server values as JSON (default: the GPU's defaults, or eager on a CPU)"
    )
    ap.add_argument("--startup-timeout", type=float, default=300.0)
    args = ap.parse_args()
    cache = args.cache or Path(tempfile.mkdtemp(prefix="autotune-anatomy-cache-"))
    os.environ["AUTOTUNE_CACHE_DIR"] = str(cache)  # the servers' compile and JIT caches (serving/machine.py)
    ctx = launch_context(args.model)
    values = (
        json.loads(args.values)
        if args.values
        else (
            {}
            if ctx.hardware.is_gpu
            else {"dtype": ctx.dtype, "enforce_eager": True, "max_model_len": 2048, "memory_utilization": 0.25}
        )
    )
    args.out.mkdir(parents=True, exist_ok=True)
    print(
        f"{ctx.installed.label()} on {ctx.hardware.describe()}; model {ctx.model.path}; values {values}; cache {cache}",
        flush=True,
    )
    runs: dict[str, dict] = {}
    failed: dict[str, str] = {}
    for i, (name, how) in enumerate(STARTS):
        log = args.out / f"start-{i + 1}-{name.replace(', ', '-')}" / "server.log"
        t0 = time.monotonic()
        print(f"[{i + 1}/{len(STARTS)}] {name}: starting", flush=True)
        try:
            runs[name] = one_start(ctx, values, how, log, args.startup_timeout)
        except Exception as e:  # a failed start or load: the next starts still measure; say why, and go on
            failed[name] = e.failure.summary() if isinstance(e, ServerFailed) else f"{type(e).__name__}: {e}"
            print(f"[{i + 1}/{len(STARTS)}] {name}: FAILED: {failed[name]} (log: {log})", flush=True)
            continue
        r = runs[name]
        print(
            f"[{i + 1}/{len(STARTS)}] {name}: /health after {r['start_s']:.1f} s, first measured request after "
            f"{r['to_first_measured_s']:.1f} s, done after {time.monotonic() - t0:.1f} s",
            flush=True,
        )
        (args.out / "starts.json").write_text(json.dumps({**runs, "failed": failed}, indent=1, default=str))
    if runs:
        show(runs)  # the zygote's own log is beside the first forked start's server.log, which names it
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
