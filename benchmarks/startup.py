"""Start-to-healthy time of the real vLLM server on the default model.

Eager vs compiled, and compiled with a cold vs a warm compile cache (VLLM_CACHE_ROOT and
TORCHINDUCTOR_CACHE_DIR pointed at a fresh directory, or at one a previous start filled).
Prints the median of N starts per mode, with min/max, and vLLM's own engine-init split.

    .venv/bin/python benchmarks/startup.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from search.serving import launch_context, resolve_server_args
from search.serving.process import launch

INIT = re.compile(r"init engine .* took ([\d.]+) s(?: \(compilation: ([\d.]+) s\))?")


def one_start(ctx, eager: bool, cache_dir: Path, log: Path) -> tuple[float, float | None, float]:
    values = {"dtype": ctx.dtype, "enforce_eager": eager, "max_model_len": 2048,
              "memory_utilization": 0.25}
    args = resolve_server_args(values, ctx)
    env = {"VLLM_CACHE_ROOT": str(cache_dir), "TORCHINDUCTOR_CACHE_DIR": str(cache_dir / "inductor")}
    server = launch(ctx, args, log, env=env)
    server.start()
    ready = server.ready_s
    stop = server.stop()
    m = INIT.search(log.read_text())
    return ready, float(m.group(1)) if m else None, stop.seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    n = ap.parse_args().repeats
    ctx = launch_context()
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
        table.add_row(mode, f"{statistics.median(xs):.1f}", f"{min(xs):.1f}", f"{max(xs):.1f}",
                      f"{statistics.median(ys):.2f}" if ys else "-")
    Console().print(table)
    print(f"stop (TERM -> group gone, port free): median {statistics.median(stops):.2f} s, "
          f"max {max(stops):.2f} s")


if __name__ == "__main__":
    main()
