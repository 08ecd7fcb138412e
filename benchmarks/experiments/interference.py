"""Interference between workers on one host: one config measured alone and beside a busy worker.

Two worker slots as `autotune search --workers 2` makes them (`app.workers.slots`). The
measured server and its load client run on slot 0; a neighbour server on slot 1 stays up the
whole time and is loaded (closed loop, as a trial loads it) only in the "beside" rounds. Rounds
alternate (alone, beside, alone, ...) on the same two servers, so drift hits both conditions.
Prints each round and, per metric, the median of each condition and their ratio.

    .venv/bin/python -m benchmarks.experiments.interference [--scenario tests/fixtures/scenarios/workers.yaml]
        [--rounds 3] [--requests 40] [--json runs/interference.json]

Starts two vLLM servers: run it under `flock /tmp/vllm-real.lock` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from app.workers import available_cpus, slots
from loadgen import LoadOptions, run_load_sync
from search.executor import plan_trial
from search.prepare import StudyOptions, prepare
from serving.process import launch

METRICS = ("output_throughput", "ttft_median_ms", "ttft_p95_ms", "tpot_median_ms", "e2el_median_ms")
NEIGHBOUR = """
import sys, time
from pathlib import Path
from loadgen import LoadOptions, run_load_sync
from search.executor import plan_trial
from search.prepare import StudyOptions, prepare
from serving.process import launch
from app.workers import Slot
slot, scenario, requests, flag, ready, log = sys.argv[1:7]
Slot.parse(slot).apply()
prep = prepare(StudyOptions(scenario))
args = plan_trial(-1, "vllm_defaults", {}, prep.baselines.get("vllm_defaults", prep.fixed), prep.ctx,
                  prep.scenario.workload.longest_request_tokens(), prep.shown).server_args
spec = prep.scenario.workload.model_copy(update={"num_requests": int(requests), "warmup_requests": 0})
with launch(prep.ctx, args, Path(log), startup_timeout_s=prep.scenario.server.startup_timeout_s) as server:
    Path(ready).write_text("up")
    while Path(ready).exists():
        if Path(flag).exists():
            run_load_sync(server.base_url, str(prep.ctx.model.path), spec,
                          options=LoadOptions(tokenizer_path=prep.ctx.model.path, scrape_metrics=False))
        else:
            time.sleep(0.2)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="tests/fixtures/scenarios/workers.yaml")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--run-dir", type=Path, default=Path("runs/interference"))
    ap.add_argument("--json", type=Path, default=Path("runs/interference.json"))
    args = ap.parse_args()
    args.run_dir.mkdir(parents=True, exist_ok=True)
    mine, other = slots(2, 0, available_cpus())
    flag, ready = args.run_dir / "neighbour-busy", args.run_dir / "neighbour-up"
    flag.unlink(missing_ok=True)
    ready.unlink(missing_ok=True)
    neighbour = subprocess.Popen(
        [
            sys.executable,
            "-c",
            NEIGHBOUR,
            other.arg,
            args.scenario,
            str(args.requests),
            str(flag),
            str(ready),
            str(args.run_dir / "neighbour.log"),
        ]
    )
    try:
        mine.apply()
        prep = prepare(StudyOptions(args.scenario))
        server_args = plan_trial(
            -1,
            "vllm_defaults",
            {},
            prep.baselines.get("vllm_defaults", prep.fixed),
            prep.ctx,
            prep.scenario.workload.longest_request_tokens(),
            prep.shown,
        ).server_args
        spec = prep.scenario.workload.model_copy(update={"num_requests": args.requests})
        runs = []
        with launch(
            prep.ctx,
            server_args,
            args.run_dir / "measured.log",
            startup_timeout_s=prep.scenario.server.startup_timeout_s,
        ) as server:
            while not ready.exists():
                assert neighbour.poll() is None, "the neighbour server did not start"
                time.sleep(0.5)
            print(f"measured on {mine.label} (client beside it), neighbour on {other.label}", flush=True)
            for r in range(args.rounds):
                for beside in (False, True):
                    if beside:
                        flag.write_text("busy")
                        time.sleep(3)  # the neighbour's load under way
                    options = LoadOptions(tokenizer_path=prep.ctx.model.path)
                    flat = run_load_sync(server.base_url, str(prep.ctx.model.path), spec, options=options).flat()
                    flag.unlink(missing_ok=True)
                    time.sleep(2 if beside else 0)  # its last requests drain
                    run = {
                        "round": r,
                        "beside": beside,
                        **{m: flat.get(m) for m in METRICS},
                        "failed": flat.get("failed"),
                    }
                    runs.append(run)
                    print(json.dumps(run), flush=True)
    finally:
        flag.unlink(missing_ok=True)
        ready.unlink(missing_ok=True)
        try:
            neighbour.wait(timeout=120)
        except subprocess.TimeoutExpired:
            neighbour.terminate()
            neighbour.wait()
    summary = {}
    for m in METRICS:
        alone = statistics.median(r[m] for r in runs if not r["beside"])
        busy = statistics.median(r[m] for r in runs if r["beside"])
        summary[m] = {"alone": alone, "beside_busy_worker": busy, "ratio": busy / alone if alone else None}
        print(f"{m:18s} alone {alone:9.2f}  beside a busy worker {busy:9.2f}  ratio {busy / alone:5.2f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"slots": [mine.label, other.label], "runs": runs, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
