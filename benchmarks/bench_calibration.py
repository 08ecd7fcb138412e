"""How far a study's calibration moves between studies, with and without its warm-up.

Runs the study's calibration (`search.executor.calibrate`, on vLLM's defaults) again and again,
each on a fresh server, the variants interleaved (cold warm cold warm ..., the order of each pair
alternating) so that the machine's drift hits both: `cold` with no warm-up load (`warmup_rounds:
0`, the calibration as it was), `warm` with the scenario's own (`warmup_rounds`, default 1). Prints
each calibration's rounds, then per variant:

* across calibrations: the median capacity and unloaded TTFT / TPOT medians, and their CV (what
  moves a study's target load and relative bounds between two studies of one machine);
* within one: the mean CV of its rounds, and how its first round's unloaded TTFT median stands
  against its median (a cold first round reads it high).

`--server-cpu-quota F` runs every server in a CPU cgroup of F cores (`benchmarks.cpu_quota`):
the same calibration on a slower server, the load generator outside the quota at full speed.

    .venv/bin/python -m benchmarks.bench_calibration [--scenario mixed] [--calibrations 4]
        [--server-cpu-quota 0.67] [--json runs/calibration_ab.json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table

from app.expected_errors import reported
from benchmarks.cpu_quota import CpuQuota
from objectives import statistics as st
from search.calibration import CalibrationResult
from search.executor import calibrate, plan_trial
from search.prepare import StudyOptions, prepare

VARIANTS = ("cold", "warm")


def first_round_ratio(cal: CalibrationResult, key: str = "ttft_median_ms") -> float:
    """The first round's unloaded `key` over the calibration's median of it."""
    first = cal.rounds[0]["unloaded"].get(key) if cal.rounds else None
    median = cal.unloaded.get(key)
    return first / median if first is not None and median else math.nan


def summary(cals: list[CalibrationResult]) -> dict[str, float]:
    caps = [c.capacity_rps for c in cals]
    ttft = [c.unloaded.get("ttft_median_ms") for c in cals]
    tpot = [c.unloaded.get("tpot_median_ms") for c in cals]
    return {
        "calibrations": len(cals),
        "capacity_median": statistics.median(caps),
        "capacity_cv": st.coefficient_of_variation(caps),
        "ttft_median": statistics.median(v for v in ttft if v is not None),
        "ttft_cv": st.coefficient_of_variation([v for v in ttft if v is not None]),
        "tpot_cv": st.coefficient_of_variation([v for v in tpot if v is not None]),
        "within_capacity_cv": statistics.mean(c.cv("capacity_rps") for c in cals),
        "within_ttft_cv": statistics.mean(c.cv("ttft_median_ms") for c in cals),
        "first_round_ttft_ratio": statistics.median(first_round_ratio(c) for c in cals),
        "seconds": statistics.median(c.seconds for c in cals),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="mixed")
    ap.add_argument("--calibrations", type=int, default=4, help="per variant")
    ap.add_argument("--server-cpu-quota", type=float, default=None, help="cores each server may use")
    ap.add_argument("--run-dir", type=Path, default=Path("runs/calibration_ab"))
    ap.add_argument("--json", type=Path, default=Path("runs/calibration_ab.json"))
    args = ap.parse_args()
    return reported("bench_calibration.py", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    console = Console()
    prep = prepare(StudyOptions(args.scenario))
    sc = prep.scenario
    defaults = prep.baselines.get("vllm_defaults", prep.fixed)
    base_args = plan_trial(
        -1, "calibration", {}, defaults, prep.ctx, sc.workload.longest_request_tokens(), prep.shown
    ).server_args
    warm_rounds = sc.calibration.warmup_rounds or 1
    settings = {
        "cold": sc.calibration.model_copy(update={"warmup_rounds": 0}),
        "warm": sc.calibration.model_copy(update={"warmup_rounds": warm_rounds}),
    }
    if args.server_cpu_quota:
        CpuQuota(args.server_cpu_quota).install()
    results: dict[str, list[CalibrationResult]] = {v: [] for v in VARIANTS}
    for i in range(args.calibrations):
        for variant in VARIANTS if i % 2 == 0 else VARIANTS[::-1]:
            scenario = sc.model_copy(update={"calibration": settings[variant]})
            cal = calibrate(scenario, prep.ctx, base_args, args.run_dir / f"{variant}-{i}")
            results[variant].append(cal)
            rounds = ", ".join(
                f"{r['capacity_rps']:.3g} req/s TTFT {r['unloaded'].get('ttft_median_ms', math.nan):.3g} ms"
                for r in cal.rounds
            )
            console.print(f"{variant} #{i}: capacity {cal.capacity_rps:.3g} req/s ({rounds}), {cal.seconds:.0f} s")

    quota = f", servers at {args.server_cpu_quota} cores" if args.server_cpu_quota else ""
    table = Table(title=f"calibration of {sc.name}, {args.calibrations} fresh servers per variant{quota}")
    table.add_column("")
    for variant in VARIANTS:
        table.add_column(f"{variant} (warm-up loads: {settings[variant].warmup_rounds})")
    rows = {v: summary(results[v]) for v in VARIANTS}
    shown = {
        "capacity_median": ("capacity, median (req/s)", "{:.3g}"),
        "capacity_cv": ("capacity CV across calibrations", "{:.0%}"),
        "ttft_median": ("unloaded TTFT median, median (ms)", "{:.3g}"),
        "ttft_cv": ("unloaded TTFT CV across calibrations", "{:.0%}"),
        "tpot_cv": ("unloaded TPOT CV across calibrations", "{:.0%}"),
        "within_capacity_cv": ("capacity CV of the rounds, mean", "{:.0%}"),
        "within_ttft_cv": ("unloaded TTFT CV of the rounds, mean", "{:.0%}"),
        "first_round_ttft_ratio": ("first round's unloaded TTFT / the median, median", "{:.2f}"),
        "seconds": ("seconds a calibration, median", "{:.0f}"),
    }
    for key, (label, fmt) in shown.items():
        table.add_row(label, *(fmt.format(rows[v][key]) for v in VARIANTS))
    console.print(table)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "scenario": sc.name,
                "server_cpu_quota": args.server_cpu_quota,
                "summary": rows,
                "calibrations": {v: [c.as_dict() for c in results[v]] for v in VARIANTS},
            },
            indent=1,
            default=str,
        )
    )
    console.print(f"written {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
