"""Capacity under the SLO, re-measured: each config on several fresh server starts.

Calibrates the scenario once on vLLM's defaults (as a study does), then runs the trial's
measurement (target stage + capacity search, `search.executor.run_stages`) on a fresh server per repeat,
configs interleaved (A B A B ...) so drift on this shared machine hits all of them. Prints each
run's capacity, bracket, stages and times, then per config the median and the spread
((max - min) / median) over the repeats.

    .venv/bin/python -m benchmarks.bench_capacity [--scenario mixed] [--repeats 3]
        [--config starved=max_num_seqs:2] [--json runs/capacity_repeats.json]

Configs: `vllm_defaults` (unless --no-defaults) and --config NAME=key:value,key:value (registry
names; default: starved=max_num_seqs:2). On `mixed` the defaults miss the short-request TTFT SLA
at the target load itself (capacity 0, by design of the scenario), so compare a feasible config
with its starved variant there:
    --no-defaults --config tuned=max_num_seqs:17,max_num_batched_tokens:980,long_prefill_token_threshold:256
    --config starved=max_num_seqs:2,max_num_batched_tokens:980,long_prefill_token_threshold:256
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from app.expected_errors import reported
from loadgen import run_async
from search import calibration
from search.executor import STAGED_SERVER_ENV, StagedLoad, calibrate, plan_trial, run_stages
from search.prepare import StudyOptions, prepare
from search.trial_results import capacity_json, stage_columns
from serving.process import launch


def parse_config(text: str) -> tuple[str, dict]:
    name, _, pairs = text.partition("=")
    values = {}
    for pair in filter(None, pairs.split(",")):
        key, _, raw = pair.partition(":")
        values[key] = json.loads(raw) if raw and raw[0] in "0123456789-[{tf" else raw
    return name, values


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="mixed")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--config", action="append", default=None, help="NAME=key:value,... (default: starved=max_num_seqs:2)"
    )
    ap.add_argument(
        "--no-defaults",
        action="store_true",
        help="leave vLLM's defaults out of the repeats (calibration still runs on them)",
    )
    ap.add_argument("--run-dir", type=Path, default=Path("runs/capacity_repeats"))
    ap.add_argument("--json", type=Path, default=Path("runs/capacity_repeats.json"))
    args = ap.parse_args()
    return reported("bench_capacity.py", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    console = Console()
    prep = prepare(StudyOptions(args.scenario))
    sc = prep.scenario
    if sc.capacity is None:
        raise SystemExit(f"{prep.shown}: no capacity: section")
    longest = sc.workload.longest_request_tokens()
    defaults = prep.baselines.get("vllm_defaults", prep.fixed)
    configs = {} if args.no_defaults else {"vllm_defaults": defaults}
    for text in args.config or ["starved=max_num_seqs:2"]:
        name, values = parse_config(text)
        configs[name] = {**prep.fixed, **values}
    base_args = plan_trial(-1, "calibration", {}, defaults, prep.ctx, longest, prep.shown).server_args
    console.print(f"calibrating {sc.name} on vLLM's defaults ...")
    cal = calibrate(sc, prep.ctx, base_args, args.run_dir)
    workload, slos, goodput = calibration.resolve(sc, cal)
    console.print(
        f"capacity (closed loop) {cal.capacity_rps:.2f} req/s; target {workload.arrival.mean_rate():.2f} "
        f"req/s; SLOs: {', '.join(f'{s.metric}<={s.max:.4g}' if s.max is not None else s.metric for s in slos)}"
    )
    runs = []
    for repeat in range(args.repeats):
        for name, config in configs.items():
            server_args = plan_trial(-1, name, {}, config, prep.ctx, longest, prep.shown).server_args
            log = args.run_dir / f"{name}-{repeat}" / "server.log"
            server = launch(
                prep.ctx, server_args, log, startup_timeout_s=sc.server.startup_timeout_s, env=STAGED_SERVER_ENV
            )
            t0 = time.monotonic()
            with server:
                start_s = server.ready_s
                staged = run_async(
                    run_stages(
                        server.base_url,
                        str(prep.ctx.model.path),
                        StagedLoad(workload, slos, sc.capacity, goodput=goodput),
                        tokenizer_path=prep.ctx.model.path,
                        on_stage=lambda s: console.print(f"  {name} #{repeat}: {s}"),
                    )
                )
            total = time.monotonic() - t0
            stage_time = sum(s.elapsed_s for s in staged.stages)
            run = {
                "config": name,
                "repeat": repeat,
                "capacity": capacity_json(staged.capacity),
                "start_s": start_s,
                "total_s": total,
                "stage_s": stage_time,
                "stages": [
                    {k: v for k, v in stage_columns(s).items() if k not in ("metrics", "server_diagnostics")}
                    for s in staged.stages
                ],
            }
            runs.append(run)
            console.print(
                f"  {name} #{repeat}: {staged.capacity.summary}; " + "; ".join(s.describe() for s in staged.stages)
            )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"calibration": cal.as_dict(), "runs": runs}, indent=1, default=str))

    table = Table(title=f"capacity under the SLO, {sc.name}: {args.repeats} fresh starts per config")
    for col in ("config", "repeat", "capacity req/s", "bracket", "stages", "aborted", "start s", "load s", "total s"):
        table.add_column(col)
    for r in runs:
        c = r["capacity"]
        table.add_row(
            r["config"],
            str(r["repeat"]),
            f"{c['rps']:.3f}",
            f"{c['low']} - {c['high']}",
            str(c["stages"]),
            str(sum(1 for s in r["stages"] if s["aborted"])),
            f"{r['start_s']:.1f}",
            f"{r['stage_s']:.1f}",
            f"{r['total_s']:.1f}",
        )
    console.print(table)
    for name in configs:
        values = [r["capacity"]["rps"] for r in runs if r["config"] == name]
        med = statistics.median(values)
        spread = (max(values) - min(values)) / med if med > 0 else float("nan")
        console.print(
            f"{name}: median {med:.3f} req/s over {len(values)} starts, range "
            f"{min(values):.3f}-{max(values):.3f} (spread {spread:.0%})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
