"""An independent check of the capacity search: fixed-rate runs with `autotune load --rate R`.

Starts one server (vLLM's defaults, or --config) (as the tuner does, dev endpoints on for the prefix-cache
reset), warms it with one run, then for each rate runs the scenario's requests through the CLI
(`autotune load <scenario> --url ... --rate R --duration S --warmup 0 --json ...`), draining the
server and resetting its prefix cache between runs as the stages do. Each run is held to the
SLOs `benchmarks/bench_capacity.py` resolved (its JSON holds the calibration), so the verdicts
can be set beside the capacity it reported: it should lie between the highest passing and the
lowest failing rate.

    .venv/bin/python -m benchmarks.experiments.capacity_scan --rates 1.0,1.2,1.4,1.6,1.8 \
        [--scenario mixed] [--calibration runs/capacity_repeats.json] [--duration 15]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.bench_capacity import parse_config
from loadgen import wait_idle
from objectives.stages import margin, stage_slos
from search import calibration
from search.executor import STAGED_SERVER_ENV, plan_trial
from search.prepare import StudyOptions, prepare
from serving.process import launch
from vllm_http import reset_prefix_cache

REPO = Path(__file__).resolve().parents[2]


def autotune_load(scenario: str, url: str, rate: float, duration: float, out: Path, warmup: int = 0) -> dict:
    cmd = [
        str(Path(sys.executable).parent / "autotune"),
        "load",
        scenario,
        "--url",
        url,
        "--rate",
        f"{rate:g}",
        "--duration",
        f"{duration:g}",
        "--warmup",
        str(warmup),
        "--json",
        str(out),
        "--quiet",
    ]
    subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", required=True, help="comma-separated requests/s")
    ap.add_argument("--scenario", default="mixed")
    ap.add_argument("--calibration", type=Path, default=Path("runs/capacity_repeats.json"))
    ap.add_argument("--duration", type=float, default=15.0)
    ap.add_argument("--run-dir", type=Path, default=Path("runs/capacity_scan"))
    ap.add_argument("--config", help="NAME=key:value,... as capacity_repeats.py (default: vLLM's defaults)")
    args = ap.parse_args()
    console = Console()
    prep = prepare(StudyOptions(args.scenario))
    cal = calibration.CalibrationResult.from_dict(json.loads(args.calibration.read_text())["calibration"])
    _, slos, _ = calibration.resolve(prep.scenario, cal)
    held = stage_slos(slos)
    config = prep.baselines.get("vllm_defaults", prep.fixed)
    if args.config:
        config = {**prep.fixed, **parse_config(args.config)[1]}
    server_args = plan_trial(
        -1, "scan", {}, config, prep.ctx, prep.scenario.workload.longest_request_tokens(), prep.shown
    ).server_args
    args.run_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    with launch(prep.ctx, server_args, args.run_dir / "server.log", env=STAGED_SERVER_ENV) as server:
        url = server.base_url
        autotune_load(args.scenario, url, float(args.rates.split(",")[0]), 10, args.run_dir / "warm.json", warmup=6)
        for rate in (float(r) for r in args.rates.split(",")):
            asyncio.run(wait_idle(url, 60))
            asyncio.run(reset_prefix_cache(url))
            result = autotune_load(args.scenario, url, rate, args.duration, args.run_dir / f"rate-{rate:g}.json")
            worst, violated = margin(result["metrics"], held)
            rows.append((rate, worst, violated, result["metrics"]))
            console.print(f"{rate:g} req/s: {'met' if worst <= 0 else 'violated'} (margin {worst:+.2f})")
    table = Table(title=f"{args.scenario}: fixed-rate runs on one server ({args.duration:g} s each)")
    for col in ("rate req/s", "verdict", "worst margin", *(s.metric for s in held)):
        table.add_column(col)
    for rate, worst, violated, m in rows:
        table.add_row(
            f"{rate:g}",
            "met" if worst <= 0 else "violated: " + ", ".join(violated),
            f"{worst:+.2f}",
            *(f"{m.get(s.metric, float('nan')):.4g}" for s in held),
        )
    console.print(table)
    console.print("SLOs: " + ", ".join(f"{s.metric} <= {s.max:.4g}" for s in held if s.max is not None))


if __name__ == "__main__":
    main()
