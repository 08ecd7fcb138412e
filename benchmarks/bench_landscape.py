"""Record a landscape of a scenario's search space on real servers, then export it as a small
data file the replay executor (search.replay) fits its surrogates on.

    python -m benchmarks.bench_landscape record [--scenario mixed] [--n 48] [--repeats 12] [--runs 3] [--seed 0]
                                          [--repeat-like benchmarks/data/landscape-mixed-cpu.json]
                                          [--model PATH] [--side-by-side K]
    python -m benchmarks.bench_landscape export [--out benchmarks/data/landscape-mixed-cpu.json]
    python -m benchmarks.bench_landscape synthetic [--out benchmarks/data/landscape-mixed-synthetic.json]
    python -m benchmarks.bench_landscape repeats OLD.json NEW.json   (the repeat tables side by side)

`record` is resumable (run the same command again): the first pass is one study on the project's
storage (a space-filling design of `n` configurations, Optuna's scrambled Sobol QMC, and the
scenario's baselines, each measured with the search's screening measurement by the real
`VllmExecutor` through the real `StudyRunner`, no confirmation); each repeat round is a study of
its own (`<study>-r2`, `-r3`: the study loop measures a flag set once per study) holding the same
`repeats` configurations in its own shuffled order, on the first pass's calibration. It starts
real vLLM servers: wrap it in `flock /tmp/vllm.lock` where others share the machine. On a GPU,
`--side-by-side K` starts K servers at a time and measures each alone (`benchmarks.side_by_side`;
benchmarks/gpu/landscape_8b.sh).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sqlalchemy.orm import Session

from app.expected_errors import reported
from search import scenario as scenario_mod
from search.calibration import CalibrationResult
from search.prepare import StudyOptions, prepare
from search.replay import Config, Landscape, LandscapeError, ScreenedRun, repeat_rounds, space_filling
from search.study import StudyRunner
from search.trial_results import capacity_of
from serving import DEFAULT_MEMORY_UTILIZATION, Hardware, default_batch
from storage import database, queries

DEFAULT_STORAGE = f"sqlite:///{REPO / 'runs' / 'landscape.db'}"


def _opts(
    scenario: str, storage: str, study: str, trials: int, seed: int, runs_dir: Path, model: str | None = None
) -> StudyOptions:
    return StudyOptions(
        scenario=scenario,
        trials=trials,
        storage=storage,
        study_name=study,
        seed=seed,
        runs_dir=runs_dir,
        confirm_runs=0,
        sampler="random",
        model=model,
    )


def _side_by_side(prep, design: list[dict[str, Any]], size: int):
    """An executor whose servers start `size` at a time (`side_by_side`), and that pool."""
    from benchmarks.side_by_side import SideBySide
    from search.executor import VllmExecutor

    # In the order the study asks: the calibration's server, the design (queued first), the baselines.
    calibration = prep.baselines.get("vllm_defaults", prep.fixed)
    upcoming = [dict(calibration)] + [{**prep.fixed, **p} for p in design] + [dict(c) for c in prep.baselines.values()]
    pool = SideBySide(upcoming, size, prep.scenario.workload.longest_request_tokens(), prep.run_dir / "side-by-side")
    return (
        lambda ctx, m: VllmExecutor(ctx, m, prep.run_dir, prep.scenario.server.startup_timeout_s, launch=pool)
    ), pool


def _enqueue_missing(runner: StudyRunner, points: list[dict[str, Any]]) -> None:
    """Queue the points the study does not hold yet (a resumed run queues nothing twice)."""
    present = [t.params for t in runner.study.get_trials(deepcopy=False) if not t.user_attrs.get("baseline")]
    for p in points:
        if p in present:
            present.remove(p)
        else:
            runner.study.enqueue_trial(p)


def record(
    scenario: str = "mixed",
    *,
    n: int = 48,
    repeats: int = 12,
    runs: int = 3,
    seed: int = 0,
    storage: str = DEFAULT_STORAGE,
    study: str | None = None,
    runs_dir: Path = REPO / "runs",
    model: str | None = None,
    side_by_side: int = 1,
    repeat_like: Path | None = None,
    ctx=None,
    executor=None,
    calibrate=None,
) -> str:
    """Measure the design (resumes where a previous call stopped); returns the study's name.
    `ctx`, `executor` and `calibrate` default to the real ones (tests pass replayed ones);
    `side_by_side` > 1 starts that many servers at a time on the one GPU (`benchmarks.side_by_side`)."""
    study = study or f"landscape-{Path(scenario).stem}"
    opts = _opts(scenario, storage, study, 0, seed, runs_dir, model)
    prep = prepare(opts, ctx=ctx)
    design = space_filling(prep.dists, n, seed)
    pool = None
    if side_by_side > 1 and executor is None:
        executor, pool = _side_by_side(prep, design, side_by_side)
        if calibrate is None:  # its server starts in the first wave
            from search.executor import calibrate as measure_calibration

            calibrate = functools.partial(measure_calibration, launcher=pool)
    first_opts = _opts(scenario, storage, study, n + len(prep.baselines), seed, runs_dir, model)
    first = StudyRunner(prep, first_opts, executor=executor, calibrate=calibrate)
    first.open()
    _enqueue_missing(first, design)
    try:
        first.run()
    finally:
        if pool is not None:
            pool.close()
    stored = _stored_calibration(storage, study)
    prefer = repeated_in(Landscape.load(repeat_like), design) if repeat_like is not None else []
    for r, order in enumerate(repeat_rounds(n, repeats, runs, seed, prefer), start=2):
        round_opts = _opts(scenario, storage, f"{study}-r{r}", repeats, seed, runs_dir, model)
        runner = StudyRunner(
            prepare(round_opts, ctx=prep.ctx), round_opts, executor=executor, calibrate=lambda *a, **k: stored
        )
        runner.open()
        _enqueue_missing(runner, [design[i] for i in order])
        runner.run()
    return study


def repeated_in(earlier: Landscape, design: list[dict[str, Any]]) -> list[int]:
    """The design's indices of the configurations an earlier landscape measured more than once
    (the same Sobol design and seed give the same points), in design order."""
    again = [c.params for c in earlier.configs if c.baseline is None and len(c.measurements) > 1]
    return [i for i, p in enumerate(design) if p in again]


def _stored_calibration(storage: str, study: str) -> CalibrationResult | None:
    with Session(database.open_db(storage)) as s:
        cal = queries.require_study(s, study).calibration
    return CalibrationResult.from_dict(cal) if cal else None


def _measurement(row, run: int) -> ScreenedRun:
    cap = capacity_of(row)
    served = row.failure_class is None or row.failure_phase not in ("startup", "precheck")
    return ScreenedRun(
        run=run,
        served=served and row.status == "ok",
        failure_class=row.failure_class,
        values=row.values,
        metrics={k: v for k, v in (row.metrics or {}).items()},
        constraints=dict(row.constraints or {}),
        feasible=bool(row.feasible),
        capacity_low=cap.low if cap is not None else None,
        capacity_high=cap.high if cap is not None else None,
        capacity=cap.rps if cap is not None and cap.fit_low is not None else None,
        capacity_fit_low=cap.fit_low if cap is not None else None,
        capacity_fit_high=cap.fit_high if cap is not None else None,
        trial_s=(row.timings or {}).get("total_s"),
        start_s=(row.timings or {}).get("start_s"),
        started_at=row.started_at.isoformat() if row.started_at else None,
    )


def export(
    storage: str = DEFAULT_STORAGE,
    study: str = "landscape-mixed",
    *,
    commands: list[str] = (),
    keep_metrics: tuple[str, ...] | None = None,
) -> Landscape:
    """The stored studies as a landscape: per config its params and every measurement (first
    pass, then the repeat rounds), with the provenance."""
    with Session(database.open_db(storage), expire_on_commit=False) as s:
        rec = queries.require_study(s, study)
        rounds = [rec] + [r for r in (queries.find_study(s, f"{study}-r{i}") for i in range(2, 10)) if r is not None]
        rows = [[row for row in queries.trial_records(s, r) if row.counts_against_budget] for r in rounds]
    sc = scenario_mod.parse(rec.scenario_source, study, scenario_mod.CONFIG_DIR)
    wanted = keep_metrics or tuple(dict.fromkeys(sc.objective_names + [x.metric for x in sc.slos]))
    configs: dict[str, Config] = {}
    for round_rows in rows:
        for row in round_rows:
            c = configs.setdefault(row.fingerprint, Config(dict(row.params), dict(row.config), row.baseline))
            m = _measurement(row, len(c.measurements) + 1)
            m.metrics = {k: v for k, v in m.metrics.items() if k in wanted}
            c.measurements.append(m)
    starts = [r.started_at for rr in rows for r in rr if r.started_at]
    ends = [r.finished_at for rr in rows for r in rr if r.finished_at]
    tokens, seqs = default_batch(Hardware.from_dict(rec.hardware))
    space = {k: d.model_dump(exclude_none=True, exclude_defaults=True) for k, d in sc.search_space.items()}
    defaults = {
        "max_num_seqs": seqs,
        "max_num_batched_tokens": tokens,
        "memory_utilization": DEFAULT_MEMORY_UTILIZATION,
        "scheduler_delay_factor": 0.0,
        "long_prefill_token_threshold": 0,
        "enable_prefix_caching": True,
    }
    return Landscape(
        scenario=sc.name,
        scenario_source=rec.scenario_source,
        objectives=[o.model_dump() for o in sc.objectives],
        slos=[x.metric for x in sc.slos],
        space=space,
        defaults={k: v for k, v in defaults.items() if k in space},
        calibration=rec.calibration or {},
        configs=list(configs.values()),
        provenance={
            "vllm_version": rec.vllm_version,
            "hardware": rec.hardware,
            "model": rec.model_path,
            "model_revision": rec.model_revision,
            "scenario_digest": rec.scenario_digest,
            "studies": [r.study_name for r in rounds],
            "commands": list(commands),
            "date": datetime.now(UTC).date().isoformat(),
            "wall_s": (max(ends) - min(starts)).total_seconds() if starts and ends else None,
            "server_starts": sum(len(rr) for rr in rows) + 1,  # the calibration's included
            "calibration_s": (rec.calibration or {}).get("seconds"),
        },
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--scenario", default="mixed")
    rec.add_argument("--n", type=int, default=48)
    rec.add_argument("--repeats", type=int, default=12)
    rec.add_argument("--runs", type=int, default=3)
    rec.add_argument("--seed", type=int, default=0)
    rec.add_argument("--storage", default=DEFAULT_STORAGE)
    rec.add_argument("--model", default=None, help="as for autotune search (default: the built-in model)")
    rec.add_argument(
        "--side-by-side",
        type=int,
        default=1,
        metavar="K",
        help="start K servers at a time, each measured alone; on a GPU the scenario's "
        "server.fixed and baselines pin kv_cache_memory_bytes (benchmarks/gpu/landscape_8b.sh)",
    )
    rec.add_argument(
        "--repeat-like",
        type=Path,
        default=None,
        metavar="LANDSCAPE.json",
        help="repeat first the configurations that this earlier landscape repeated (the same design's points)",
    )
    exp = sub.add_parser("export")
    exp.add_argument("--storage", default=DEFAULT_STORAGE)
    exp.add_argument("--study", default="landscape-mixed")
    exp.add_argument("--out", type=Path, default=REPO / "benchmarks" / "data" / "landscape-mixed-cpu.json")
    exp.add_argument(
        "--recorded-with",
        default="flock /tmp/vllm.lock python -m benchmarks.bench_landscape record",
        help="the record command, as run (kept in the provenance)",
    )
    rep = sub.add_parser("repeats", help="the repeat table of one or more exported landscapes, side by side")
    rep.add_argument("landscapes", nargs="+", type=Path)
    syn = sub.add_parser("synthetic")
    syn.add_argument("--seed", type=int, default=0)
    syn.add_argument("--out", type=Path, default=REPO / "benchmarks" / "data" / "landscape-mixed-synthetic.json")
    args = ap.parse_args(argv)
    return reported("bench_landscape.py", lambda: _run(args), also=(LandscapeError,))


def _run(args: argparse.Namespace) -> int:
    if args.cmd == "record":
        t0 = time.monotonic()
        try:
            name = record(
                args.scenario,
                n=args.n,
                repeats=args.repeats,
                runs=args.runs,
                seed=args.seed,
                storage=args.storage,
                model=args.model,
                side_by_side=args.side_by_side,
                repeat_like=args.repeat_like,
            )
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM from a time limit (the GPU recipe's)
            print(
                f"interrupted after {time.monotonic() - t0:.0f} s: no server is left running; the same "
                "command continues where the landscape stopped"
            )
            return 130
        print(
            f"study {name} recorded ({time.monotonic() - t0:.0f} s this run); "
            f"export: python -m benchmarks.bench_landscape export --study {name}"
        )
    elif args.cmd == "repeats":
        for path in args.landscapes:
            print(Landscape.load(path).repeats().line(path.name))
    elif args.cmd == "export":
        queries.existing_study_check(
            args.storage, args.study, "record it first (python -m benchmarks.bench_landscape record)"
        )
        landscape = export(
            args.storage,
            args.study,
            commands=[
                args.recorded_with,
                " ".join(["python -m benchmarks.bench_landscape", *sys.argv[1:]]),
            ],
        )
        landscape.save(args.out)
        print(f"{args.out}: {len(landscape.configs)} configs, {len(landscape.measurements())} measurements")
    else:
        from search.replay import synthetic

        sc, _, _ = scenario_mod.load("mixed")
        landscape = synthetic.landscape(sc, {k: dict(v) for k, v in sc.baselines.items()}, seed=args.seed)
        landscape.save(args.out)
        print(f"{args.out}: SYNTHETIC, {len(landscape.configs)} configs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
