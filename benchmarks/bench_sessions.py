"""Prefix caching on and off under the same multi-turn session workload, on real servers.

Each repeat starts a fresh server per config (on, off, on, off, ...: drift on this shared machine
hits both), runs the scenario's session workload as a closed loop of `--users` users running
`--sessions` sessions each run, and keeps every turn. Prints, per turn index, each config's
TTFT median with its 95% interval (requests pooled over the repeats) and the ratio off / on with
its interval; then the prefix reuse the sessions imply against each server's measured
prefix-cache hit rate.

    .venv/bin/python -m benchmarks.bench_sessions [--scenario chat_sessions] [--repeats 2]
        [--users 3] [--sessions 12] [--json runs/sessions_prefix.json]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from app.expected_errors import reported
from loadgen import ArrivalSpec, LoadOptions, run_load_sync
from objectives.statistics import median_interval, relative_difference
from search.executor import plan_trial
from search.prepare import StudyOptions, prepare
from serving.process import launch

CONFIGS = {"prefix caching on": {"enable_prefix_caching": True}, "prefix caching off": {"enable_prefix_caching": False}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="chat_sessions")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--users", type=int, default=3, help="sessions in flight at once")
    ap.add_argument("--sessions", type=int, default=12, help="sessions a run")
    ap.add_argument("--run-dir", type=Path, default=Path("runs/sessions_prefix"))
    ap.add_argument("--json", type=Path, default=Path("runs/sessions_prefix.json"))
    args = ap.parse_args()
    return reported("bench_sessions.py", lambda: _run(args))


def _fmt(iv) -> str:
    return f"{iv.value:.0f} [{iv.low:.0f}, {iv.high:.0f}]"


def _run(args: argparse.Namespace) -> int:
    console = Console()
    prep = prepare(StudyOptions(args.scenario))
    base = prep.scenario.workload
    if base.sessions is None:
        raise SystemExit(f"{prep.shown}: not a session workload (workload.sessions)")
    workload = base.model_copy(
        update={
            "arrival": ArrivalSpec(mode="closed", concurrency=args.users),
            "num_requests": round(args.sessions * base.sessions.mean_turns()),
            "duration_s": None,
        }
    )
    longest = workload.longest_request_tokens()
    ttft: dict[str, dict[int, list[float]]] = {name: defaultdict(list) for name in CONFIGS}
    runs = []
    for repeat in range(args.repeats):
        for name, values in CONFIGS.items():
            server_args = plan_trial(-1, name, {}, {**prep.fixed, **values}, prep.ctx, longest, prep.shown).server_args
            log = args.run_dir / f"{name.replace(' ', '_')}-{repeat}" / "server.log"
            with launch(prep.ctx, server_args, log, startup_timeout_s=prep.scenario.server.startup_timeout_s) as server:
                options = LoadOptions(tokenizer_path=prep.ctx.model.path)
                result = run_load_sync(server.base_url, None, workload, options=options)
            report = result.sessions
            hit = result.server.prefix_cache_hit_rate if result.server is not None else float("nan")
            for r in result.records:
                if r.ok and r.turn is not None:
                    ttft[name][r.turn].append(r.ttft * 1000)
            runs.append(
                {
                    "config": name,
                    "repeat": repeat,
                    "hit_rate": hit,
                    "sessions": report.to_json() if report is not None else None,
                    "metrics": result.flat(),
                }
            )
            console.print(
                f"{name} #{repeat}: {report.completed if report else 0} sessions, "
                f"{int(result.flat()['completed'])} turns, {int(result.flat()['failed'])} failed; "
                f"reuse the sessions imply {report.reuse_share if report else float('nan'):.3f}, "
                f"server hit rate {hit:.3f}"
            )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"runs": runs}, indent=1, default=str))

    on, off = CONFIGS
    table = Table(title=f"TTFT by turn (ms, median [95% interval]), {args.repeats} fresh servers each")
    for col in ("turn", f"{on} (n)", f"{off} (n)", "off / on"):
        table.add_column(col, justify="right")
    for turn in sorted(set(ttft[on]) | set(ttft[off])):
        a, b = ttft[on][turn], ttft[off][turn]
        ratio = relative_difference(b, a)
        table.add_row(
            str(turn),
            f"{_fmt(median_interval(a))} ({len(a)})",
            f"{_fmt(median_interval(b))} ({len(b)})",
            f"{1 + ratio.value:.2f} [{1 + ratio.low:.2f}, {1 + ratio.high:.2f}]",
        )
    console.print(table)
    for name in CONFIGS:
        mine = [r for r in runs if r["config"] == name]
        console.print(
            f"{name}: reuse the sessions imply "
            + ", ".join(f"{r['sessions']['reuse_share']:.3f}" for r in mine if r["sessions"])
            + "; server prefix-cache hit rate "
            + ", ".join(f"{r['hit_rate']:.3f}" for r in mine)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
