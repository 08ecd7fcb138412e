"""Start-to-healthy time of the real vLLM server on the default model.

Eager vs compiled, and compiled with a cold vs a warm compile cache (VLLM_CACHE_ROOT and
TORCHINDUCTOR_CACHE_DIR pointed at a fresh directory, or at one a previous start filled).
Prints the median of N starts per mode, with min/max, and vLLM's own engine-init split.

`--compare`: starts of one config by different entries (serving/process/server.py), interleaved
ABAB..., each start followed by the same fixed load (180 requests, 90 s): the start seconds (median,
range), each start's anatomy, its processes' nice value, CPUs and threads, its slowest first tokens
with their send times, and the served TTFT/TPOT median/p95 per entry, so "the same server" is a
measured claim; about 12 min for 3 pairs of `lean,zygote` on the 2-core CPU. Entries (`--entries`,
default `lean,warm`): `module` (`python -m` the API server module: vLLM's spawned EngineCore and CPU
worker re-import the whole HTTP stack), `lean` (`LEAN_ENTRY`: the module run from `-c`, vLLM as it
is: no plugin, vLLM's own start method for its EngineCore), `warm` (the tuner's entry, exec'd per
start: its vLLM plugin and, on the CPU build, the EngineCore and its worker forked from a forkserver
that imported vLLM beside the API server; on a GPU vLLM forks its EngineCore), `zygote` (the
default: that server forked by an interpreter that imported vLLM once, at its first start; that
first start pays the import, the later ones do not).

    .venv/bin/python -m benchmarks.bench_startup [--repeats 3] [--compare [--entries lean,warm]]
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

from loadgen import LoadOptions, WorkloadSpec, run_async, run_load
from serving import launch_context, process, resolve_server_args
from serving.process import FirstTokenWatch, VllmServer, launch, while_serving

# The fixed load after each start of --compare: the same requests every time (one seed). 180, not
# fewer: a p95 of 60 requests is about their third-slowest, and three slow requests read as a
# different server (docs/results.md, "Server starts").
FIXED_LOAD = {
    "endpoint": "completions",
    "prompt_tokens": 200,
    "output_tokens": 32,
    "arrival": {"mode": "poisson", "rate": 2.0},
    "num_requests": 180,
    "warmup_requests": 4,
    "seed": 7,
    "request_timeout_s": 120,
}
SERVED = ("ttft_median_ms", "ttft_p95_ms", "tpot_median_ms", "tpot_p95_ms")

INIT = re.compile(r"init engine .* took ([\d.]+) s(?: \(compilation: ([\d.]+) s\))?")


def one_start(ctx, eager: bool, cache_dir: Path, log: Path) -> tuple[float, float | None, float]:
    values = {"dtype": ctx.dtype, "enforce_eager": eager, "max_model_len": 2048, "memory_utilization": 0.25}
    args = resolve_server_args(values, ctx)
    env = {"VLLM_CACHE_ROOT": str(cache_dir), "TORCHINDUCTOR_CACHE_DIR": str(cache_dir / "inductor")}
    server = launch(ctx, args, log, env=env)
    server.start()
    ready = server.ready_s
    stop = server.stop()
    m = INIT.search(log.read_text())
    return ready, float(m.group(1)) if m else None, stop.seconds


# (lean_children, warm_children, zygote, plugin, fork_engine): serving/process/launch_spec.py
ENTRIES = {
    "module": (False, False, False, False, False),
    "lean": (True, False, False, False, False),
    "warm": (True, True, False, True, True),
    "zygote": (True, True, True, True, True),
}


def placement(server: VllmServer) -> str:
    """Where each process of the server's group runs: its title, nice value, allowed CPUs and
    threads, so that "the same server" covers scheduling as well as the served figures."""
    rows = []
    guard = psutil.Process(server.pgid)
    for p in (guard, *guard.children(recursive=True)):
        try:
            with p.oneshot():
                title = " ".join(p.cmdline()) or p.name()
                rows.append(f"{title[:48]} nice {p.nice()} cpus {p.cpu_affinity()} threads {p.num_threads()}")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return "; ".join(sorted(rows))


def slowest(records, n: int = 8) -> str:
    """The `n` slowest first tokens with their send times from the load's start: slow requests
    that cluster after the start are the start's doing; at the same times in every start, the
    load's own bursts."""
    done = [r for r in records if r.first_token_time is not None]
    t0 = min(r.send_time for r in done)
    return ", ".join(
        f"{r.ttft * 1e3:.0f} ms @{r.send_time - t0:.1f} s" for r in sorted(done, key=lambda r: -r.ttft)[:n]
    )


def served_start(ctx, entry: str, log: Path) -> dict:
    """One start (by `entry`, of ENTRIES) of the compared config, the fixed load on it, its stop."""
    values = {"dtype": ctx.dtype, "enforce_eager": True, "max_model_len": 2048, "memory_utilization": 0.25}
    # process.launch_spec: the function; `from serving.process import launch_spec` reads to
    # import-linter as the module of that name inside the facade
    spec = process.launch_spec(ctx, resolve_server_args(values, ctx), log)
    spec.lean_children, spec.warm_children, spec.zygote, spec.plugin, spec.fork_engine = ENTRIES[entry]
    server = VllmServer(spec)
    server.start()
    healthy_at = time.perf_counter()
    where = placement(server)
    try:
        model, watch = str(ctx.model.path), FirstTokenWatch(60.0)
        result = run_async(
            while_serving(
                server,
                run_load(
                    server.base_url,
                    model,
                    WorkloadSpec.model_validate(FIXED_LOAD),
                    options=LoadOptions(tokenizer_path=model, watch=watch),
                ),
                "load",
                watch,
            )
        )
    finally:
        report = server.stop()
    metrics = result.flat_metrics()
    first = watch.first_token_at()  # perf_counter, like `healthy_at`
    anatomy = report.start_anatomy.with_first_token(first - healthy_at if first is not None else None)
    return {
        "start_s": server.ready_s,
        "anatomy": anatomy.phases,
        "placement": where,
        "slowest": slowest(result.records),
        **{k: metrics[k] for k in SERVED},
    }


def compare(ctx, n: int, work: Path, entries: list[str]) -> None:
    modes = {m: m for m in entries}
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    for i in range(n):  # ABAB..., so drift on a shared machine hits both alike
        for k, mode in enumerate(modes):
            r = served_start(ctx, mode, work / f"compare-{i}-{k}.log")
            runs[mode].append(r)
            phases = " + ".join(f"{p} {s:.1f}" for p, s in r["anatomy"].items() if s is not None)
            print(
                f"run {i + 1}/{n} {mode}: /health after {r['start_s']:.1f} s ({phases}); "
                + ", ".join(f"{k} {r[k]:.1f}" for k in SERVED)
                + f"\n  processes: {r['placement']}\n  slowest first tokens: {r['slowest']}",
                flush=True,
            )
    table = Table(
        title=f"{' vs '.join(modes)} start, interleaved, n={n} each, {ctx.installed.label()}, "
        f"{ctx.hardware.describe()}; the fixed load: {FIXED_LOAD['num_requests']} requests "
        f"at {FIXED_LOAD['arrival']['rate']} rps"
    )
    table.add_column("")
    for mode in modes:
        table.add_column(mode, justify="right")

    def spread(xs: list[float]) -> str:
        return f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})"

    table.add_row("start to /health, s", *(spread([r["start_s"] for r in runs[m]]) for m in modes))
    phases = list(next(iter(runs.values()))[0]["anatomy"])
    for p in phases:
        table.add_row(
            f"  {p}, s",
            *(
                spread([r["anatomy"][p] for r in runs[m] if r["anatomy"].get(p) is not None] or [float("nan")])
                for m in modes
            ),
        )
    for key in SERVED:
        table.add_row(key, *(spread([r[key] for r in runs[m]]) for m in modes))
    Console().print(table)
    old, new = (statistics.median(r["start_s"] for r in runs[m]) for m in (entries[0], entries[-1]))
    print(f"median start: {entries[0]} {old:.1f} s -> {entries[-1]} {new:.1f} s ({new / old - 1:+.0%})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--compare", action="store_true", help="starts by two or more entries, each under the same short load"
    )
    ap.add_argument("--entries", default="lean,warm", help=f"--compare: comma-separated, of {', '.join(ENTRIES)}")
    args = ap.parse_args()
    n = args.repeats
    ctx = launch_context()
    if args.compare:
        entries = args.entries.split(",")
        if unknown := [e for e in entries if e not in ENTRIES]:
            ap.error(f"--entries: unknown {', '.join(unknown)}; allowed: {', '.join(ENTRIES)}")
        compare(ctx, n, Path(tempfile.mkdtemp(prefix="autotune-startup-")), entries)
        return
    work = Path(tempfile.mkdtemp(prefix="autotune-startup-"))
    warm_cache = work / "warm"
    modes = {"eager": [], "compiled, cold cache": [], "compiled, warm cache": []}
    inits = {k: [] for k in modes}
    stops = []
    one_start(ctx, False, warm_cache, work / "prewarm.log")  # fills the warm cache
    for i in range(n):  # interleaved, so drift on a shared machine hits every mode alike
        for k, mode in enumerate(modes):
            eager = mode == "eager"
            cache = warm_cache if "warm" in mode else work / f"cold-{i}-{k}"
            ready, init, stop_s = one_start(ctx, eager, cache, work / f"run-{i}-{k}.log")
            modes[mode].append(ready)
            inits[mode].append(init)
            stops.append(stop_s)
            print(f"run {i + 1}/{n} {mode}: healthy after {ready:.1f} s (engine init {init} s)")
    table = Table(title=f"start to /health 200, {ctx.installed.label()}, {ctx.hardware.describe()}, n={n}")
    for col in ("mode", "median s", "min s", "max s", "engine init median s"):
        table.add_column(col)
    for mode, xs in modes.items():
        ys = [x for x in inits[mode] if x is not None]
        table.add_row(
            mode,
            f"{statistics.median(xs):.1f}",
            f"{min(xs):.1f}",
            f"{max(xs):.1f}",
            f"{statistics.median(ys):.2f}" if ys else "-",
        )
    Console().print(table)
    print(f"stop (TERM -> group gone, port free): median {statistics.median(stops):.2f} s, max {max(stops):.2f} s")


if __name__ == "__main__":
    main()
