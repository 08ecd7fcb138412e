"""Screening without a restart, A/B: does a server whose scheduler limits were lowered in place
measure what a fresh start of the same configuration measures?

Calibrates the scenario on vLLM's defaults (as a study does) and takes its screening
measurement (`Measurement.screened`: the search phase's). Each repeat has two blocks, in
alternating order from one repeat to the next, the configurations rotated within each so drift
on the shared machine hits both arms:
- reconfigured: one server started at the large limits (BIG, measured: BIG's fresh sample of this
  repeat), then every configuration measured on it in turn after a live reconfiguration, BIG last
  (back at its own start values): the executor's own path (`VllmExecutor` with `reconfigure`);
- fresh: every configuration but BIG on a fresh start.
Prints per configuration and metric the fresh and the reconfigured medians, their ratio with a
paired bootstrap 95% interval (the pairs: one repeat's two runs), whether it is beyond the
run-to-run noise (`objectives.statistics.beyond_noise`: the fresh runs' CV pooled over the
configurations), and per metric the pooled ratio (the geometric mean of every pair's ratio, with a
bootstrap interval). Verdict "within the noise": with at least 6 configurations and 3 repeats,
every metric's pooled interval holds 1 and no more rows are beyond the noise than 5% of them (what
chance alone flags). Fewer: a smoke run, no verdict.

    .venv/bin/python -m benchmarks.bench_reconfigure [--scenario mixed] [--repeats 3]
        [--big max_num_seqs:64,max_num_batched_tokens:2048,long_prefill_token_threshold:0]
        [--config NAME=key:value,...] [--calibration FILE] [--capacity-fraction F]
        [--json runs/reconfigure_ab.json]

`--capacity-fraction` sets the target load (`make bench-reconfigure`: 0.25): where the
configurations miss the SLOs at the target, the screening runs no capacity stage and their
capacity is not compared. `--target-s`, `--max-stages` shorten the measurement (a smoke run of the
code path only). On the 2-core CPU (a calibration, then 3 repeats of 14 screening measurements and
7 starts): 28 min at mixed's own 0.4 (33-37 s a measurement), 67 min at 0.25 (92-99 s: the
capacity stages run).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table
from scipy import stats

from app.expected_errors import reported
from benchmarks.bench_capacity import parse_config
from objectives.capacity import SLO_CAPACITY_RPS
from objectives.statistics import beyond_noise, difference, pooled_cv, ratio
from search import calibration
from search.executor import Measurement, TrialPlan, VllmExecutor, calibrate, plan_trial
from search.prepare import StudyOptions, prepare
from search.scenario import Scenario
from search.trial_results import TrialOutcome

BIG = "max_num_seqs:64,max_num_batched_tokens:2048,long_prefill_token_threshold:0"
# Each knob lowered alone, then together: every limit the reconfiguration sets is exercised.
CONFIGS = (
    "seqs32=max_num_seqs:32,max_num_batched_tokens:2048,long_prefill_token_threshold:0",
    "tokens1024=max_num_seqs:64,max_num_batched_tokens:1024,long_prefill_token_threshold:0",
    "threshold256=max_num_seqs:64,max_num_batched_tokens:2048,long_prefill_token_threshold:256",
    "s16-t512-l256=max_num_seqs:16,max_num_batched_tokens:512,long_prefill_token_threshold:256",
    "s8-t1024-l512=max_num_seqs:8,max_num_batched_tokens:1024,long_prefill_token_threshold:512",
    "s24-t768=max_num_seqs:24,max_num_batched_tokens:768,long_prefill_token_threshold:0",
)
METRICS = ("ttft_p95_ms@short", "tpot_p95_ms", SLO_CAPACITY_RPS)
MIN_CONFIGS, MIN_REPEATS = 6, 3
FRESH, RECONFIGURED = "fresh", "reconfigured"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="mixed")
    ap.add_argument("--repeats", type=int, default=MIN_REPEATS)
    ap.add_argument("--big", default=BIG, help="the reconfigured server's start: key:value,...")
    ap.add_argument("--config", action="append", default=None, help="NAME=key:value,... (default: six)")
    ap.add_argument("--metrics", default=",".join(METRICS))
    ap.add_argument("--calibration", type=Path, help="a --json file of an earlier run: its calibration")
    ap.add_argument(
        "--capacity-fraction",
        type=float,
        help="the target load as a fraction of the calibrated capacity, instead of the scenario's: "
        "lower it until the configurations meet the SLOs there, or their capacity is never compared",
    )
    ap.add_argument("--target-s", type=float, help="the target stage's sending window (smoke runs)")
    ap.add_argument("--max-stages", type=int, help="capacity stages after the target (smoke runs)")
    ap.add_argument("--run-dir", type=Path, default=Path("runs/reconfigure_ab"))
    ap.add_argument("--json", type=Path, default=Path("runs/reconfigure_ab.json"))
    args = ap.parse_args()
    if args.capacity_fraction is not None and not 0 < args.capacity_fraction <= 1:
        ap.error(f"--capacity-fraction: {args.capacity_fraction}; allowed: above 0, at most 1")
    return reported("bench_reconfigure.py", lambda: _run(args))


def at_capacity_fraction(sc: Scenario, fraction: float | None) -> Scenario:
    """`sc` with its target load at `fraction` of the calibrated capacity (None: as it is)."""
    if fraction is None:
        return sc
    given = sc.workload.arrival
    arrival = type(given).model_validate({**given.model_dump(), "capacity_fraction": fraction, "rate": None})
    return sc.model_copy(update={"workload": sc.workload.model_copy(update={"arrival": arrival})})


def _measurement(args: argparse.Namespace, console: Console):
    prep = prepare(StudyOptions(args.scenario))
    sc = at_capacity_fraction(prep.scenario, args.capacity_fraction)
    longest = sc.workload.longest_request_tokens()
    defaults = prep.baselines.get("vllm_defaults", prep.fixed)
    if args.calibration is not None:
        cal = calibration.CalibrationResult.from_dict(json.loads(args.calibration.read_text())["calibration"])
    else:
        console.print(f"calibrating {sc.name} on vLLM's defaults ...")
        base = plan_trial(-1, "calibration", {}, defaults, prep.ctx, longest, prep.shown).server_args
        cal = calibrate(sc, prep.ctx, base, args.run_dir)
    workload, slos, goodput = calibration.resolve(sc, cal)
    full = Measurement(workload, goodput, tuple(slos), sc.capacity, cal.slowest_unloaded_ttft_ms())
    screened = full.screened(sc.screening)
    if args.target_s is not None:
        screened = replace(screened, workload=screened.workload.model_copy(update={"duration_s": args.target_s}))
    if args.max_stages is not None and screened.capacity is not None:
        screened = replace(screened, capacity=screened.capacity.model_copy(update={"max_stages": args.max_stages}))

    def plan(name: str, text: str, repeat: int, arm: str) -> TrialPlan:
        values = {**prep.fixed, **parse_config(f"{name}={text}")[1]}
        p = plan_trial(-1, name, {}, values, prep.ctx, longest, prep.shown)
        if p.problems:
            raise SystemExit(f"bench_reconfigure.py: {name}: {'; '.join(p.problems)}")
        p.run_name = f"{arm}-{name}-{repeat}"
        return p

    return prep, cal, screened, plan


def _row(outcome: TrialOutcome, name: str, repeat: int, arm: str, metrics: list[str]) -> dict:
    reuse = outcome.timings.reuse
    reused = reuse is not None and reuse.declined is None
    return {
        "config": name,
        "repeat": repeat,
        "arm": RECONFIGURED if reused else FRESH,
        "asked": arm,
        "ok": outcome.failure is None,
        "failure": outcome.failure.summary() if outcome.failure else None,
        "declined": reuse.declined if reuse is not None else None,
        "metrics": {m: outcome.metrics.get(m, math.nan) for m in metrics},
        "start_s": outcome.timings.start_s,
        "total_s": outcome.timings.total_s,
        "reconfigure_s": reuse.reconfigure_s if reuse is not None and reused else None,
        # a fresh start's phases, the tuner's clock included: /health to the first token and the warm-up
        "start_phases": outcome.timings.start_anatomy.as_dict()["phases"] if outcome.timings.start_anatomy else None,
    }


def _run(args: argparse.Namespace) -> int:
    console = Console(width=160)  # the table's seven columns, unwrapped
    metrics = args.metrics.split(",")
    configs = dict(parse_config_text(t) for t in (args.config or CONFIGS))
    configs["BIG"] = args.big
    prep, cal, screened, plan = _measurement(args, console)
    fresh_ex = VllmExecutor(prep.ctx, replace(screened, reconfigure=False), args.run_dir)
    lowered = [n for n in configs if n != "BIG"]
    runs: list[dict] = []

    def record(outcome: TrialOutcome, name: str, repeat: int, arm: str) -> None:
        row = _row(outcome, name, repeat, arm, metrics)
        runs.append(row)
        shown = ", ".join(f"{m} {v:.4g}" for m, v in row["metrics"].items())
        console.print(
            f"  #{repeat} {row['arm']:>12} {name}: {shown}" + (f" ({row['failure']})" if row["failure"] else "")
        )
        if arm == RECONFIGURED and name != "BIG" and row["arm"] != RECONFIGURED:
            console.print(f"    [yellow]not reconfigured: {row['declined']}[/]")
        args.json.parent.mkdir(parents=True, exist_ok=True)
        kept = {"calibration": cal.as_dict(), "target_rps": screened.workload.arrival.rate, "runs": runs}
        args.json.write_text(json.dumps(kept, indent=1, default=str))

    for repeat in range(args.repeats):
        order = lowered[repeat % len(lowered) :] + lowered[: repeat % len(lowered)]
        blocks = [RECONFIGURED, FRESH] if repeat % 2 == 0 else [FRESH, RECONFIGURED]
        for block in blocks:
            if block == FRESH:
                for name in order:
                    record(fresh_ex.run(plan(name, configs[name], repeat, FRESH)), name, repeat, FRESH)
                continue
            ex = VllmExecutor(prep.ctx, replace(screened, reconfigure=True), args.run_dir)
            try:
                record(ex.run(plan("BIG", configs["BIG"], repeat, "start")), "BIG", repeat, FRESH)
                for name in [*order, "BIG"]:
                    record(ex.run(plan(name, configs[name], repeat, RECONFIGURED)), name, repeat, RECONFIGURED)
            finally:
                ex.close()
    console.print(table(runs, metrics, list(configs), args.repeats))
    console.print(verdict(runs, metrics, list(configs), args.repeats))
    saved = [r["total_s"] for r in runs if r["arm"] == FRESH and r["total_s"]]
    reused = [r["total_s"] for r in runs if r["arm"] == RECONFIGURED and r["total_s"]]
    if saved and reused:
        console.print(
            f"median trial: {statistics.median(saved):.0f} s on a fresh start, "
            f"{statistics.median(reused):.0f} s reconfigured"
        )
    console.print(f"runs: {args.json}")
    return 0


def parse_config_text(text: str) -> tuple[str, str]:
    name, _, pairs = text.partition("=")
    return name, pairs


def values(runs: list[dict], config: str, arm: str, metric: str, repeats: int) -> list[float]:
    """One value per repeat (NaN where that run failed or was not of this arm), in repeat order."""
    by = {r["repeat"]: r for r in runs if r["config"] == config and r["arm"] == arm and r["ok"]}
    return [by[i]["metrics"][metric] if i in by else math.nan for i in range(repeats)]


def noise(runs: list[dict], metric: str, configs: list[str], repeats: int) -> float:
    return pooled_cv([values(runs, c, FRESH, metric, repeats) for c in configs])


def pooled_ratio(runs: list[dict], metric: str, configs: list[str], repeats: int) -> tuple[float, float, float]:
    """The geometric mean of every (reconfigured / fresh) pair's ratio, with a bootstrap 95% interval."""
    logs = [
        math.log(a / b)
        for c in configs
        for a, b in zip(values(runs, c, RECONFIGURED, metric, repeats), values(runs, c, FRESH, metric, repeats))
        if a > 0 and b > 0 and math.isfinite(a) and math.isfinite(b)
    ]
    if len(logs) < 2:
        return math.nan, math.nan, math.nan
    res = stats.bootstrap((np.asarray(logs),), np.mean, n_resamples=4999, method="percentile", random_state=1)
    ci = res.confidence_interval
    return math.exp(float(np.mean(logs))), math.exp(ci.low), math.exp(ci.high)


def rows(runs: list[dict], metrics: list[str], configs: list[str], repeats: int):
    for metric in metrics:
        cv = noise(runs, metric, configs, repeats)
        for c in configs:
            fresh, reconf = values(runs, c, FRESH, metric, repeats), values(runs, c, RECONFIGURED, metric, repeats)
            diff = difference(reconf, fresh, paired=True)
            r = ratio(diff)
            beyond = diff.n >= 2 and diff.kind == "relative" and beyond_noise(diff.value, cv, diff.n)
            yield metric, c, fresh, reconf, diff, r, cv, beyond


def _median(xs: list[float]) -> float:
    finite = [x for x in xs if math.isfinite(x)]
    return statistics.median(finite) if finite else math.nan


def table(runs: list[dict], metrics: list[str], configs: list[str], repeats: int) -> Table:
    t = Table(title=f"fresh start vs reconfigured server, medians of {repeats} repeats")
    for col in ("metric", "config", "fresh", "reconfigured", "ratio [95%]", "noise (CV)", "beyond noise"):
        t.add_column(col, justify="left" if col in ("metric", "config") else "right")
    for metric, c, fresh, reconf, diff, r, cv, beyond in rows(runs, metrics, configs, repeats):
        shown = (
            f"{r.value:.3f} [{r.low:.3f}, {r.high:.3f}]"
            if r is not None
            else (f"{diff.value:+.3g} abs" if math.isfinite(diff.value) else "-")
        )
        t.add_row(
            metric, c, f"{_median(fresh):.4g}", f"{_median(reconf):.4g}", shown, f"{cv:.1%}", "yes" if beyond else ""
        )
    for metric in metrics:
        g, low, high = pooled_ratio(runs, metric, configs, repeats)
        t.add_row(metric, "[bold]pooled[/]", "", "", f"{g:.3f} [{low:.3f}, {high:.3f}]", "", "")
    return t


def verdict(runs: list[dict], metrics: list[str], configs: list[str], repeats: int) -> str:
    measured = [c for c in configs if any(r["config"] == c and r["arm"] == RECONFIGURED for r in runs)]
    if len(measured) < MIN_CONFIGS or repeats < MIN_REPEATS:
        return (
            f"smoke run ({len(measured)} configurations reconfigured, {repeats} repeats; an A/B needs "
            f"{MIN_CONFIGS} and {MIN_REPEATS}): no verdict"
        )
    # A metric with fewer than two pairs valued on both arms (a capacity where the configurations
    # missed at the target, 0: the screening does not search below it) is no evidence either way.
    pooled = {m: pooled_ratio(runs, m, configs, repeats) for m in metrics}
    unmeasured = [m for m in metrics if math.isnan(pooled[m][0])]
    compared = [m for m in metrics if m not in unmeasured]
    flagged = [(m, c) for m, c, *_rest, beyond in rows(runs, compared, configs, repeats) if beyond]
    total = len(configs) * len(compared)
    allowed = int(0.05 * total)
    off = [m for m in compared if not pooled[m][1] <= 1.0 <= pooled[m][2]]
    why = [f"pooled ratio off 1 for {', '.join(off)}"] if off else []
    if len(flagged) > allowed:
        why.append(
            f"{len(flagged)} of {total} rows beyond the noise ({allowed} allowed): "
            + ", ".join(f"{c} {m}" for m, c in flagged)
        )
    if unmeasured:
        hint = " (lower --capacity-fraction until they meet the target)" if SLO_CAPACITY_RPS in unmeasured else ""
        why.append(f"not compared (fewer than 2 pairs valued on both arms): {', '.join(unmeasured)}{hint}")
    if not why:
        return f"within the noise ({len(flagged)} of {total} rows beyond it, {allowed} allowed)"
    return "NOT shown within the noise: " + "; ".join(why)


if __name__ == "__main__":
    raise SystemExit(main())
