"""The commands that run a study: `autotune search` (one process or many workers), `autotune worker`
(one more worker on a stored study) and `autotune confirm` (the confirmation phase alone)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from app.cli.arg_types import minutes, non_negative_int, positive_float, positive_int
from app.cli.common import add_db_outage, add_study_target, finish_outputs, make_console, study_name
from search.disk import DEFAULT_RUNS_DIR

if TYPE_CHECKING:
    from app.worker_options import WorkerOptions
    from search.prepare import StudyOptions


def _cmd_search(args: argparse.Namespace) -> int:
    """`autotune search`: the search, then the confirmation phase; `autotune confirm`: the phase alone."""
    from app.outputs import DashboardPublisher, StudyProgress
    from search.prepare import prepare
    from search.study import StudyRunner
    from search.study.coordination import Coordination
    from storage.url import redacted

    searching = args.command == "search"
    opts = study_options(args)
    if searching and args.workers > 1:
        if args.warm_start:
            from search.study import StudyMismatch

            raise StudyMismatch(
                "--warm-start runs in one process: drop --workers, or warm-start first and add "
                "workers to the study with `autotune worker`"
            )
        # The workers' parent opens the study on its stored calibration: --recalibrate is taken
        # by a search in one process only.
        return _cmd_search_workers(args, replace(opts, recalibrate=False))
    console = make_console()
    prep = prepare(opts)  # every check before any server starts
    if searching and args.dry_run:
        return _dry_run(prep, opts, console)
    if not searching:
        from storage.queries import existing_study_check

        existing_study_check(prep.storage_url, prep.study_name, f"run `autotune search {args.scenario}` first")
    sampling = f"; sampler {prep.sampler}" if searching else ""
    console.print(
        f"study [bold]{prep.study_name}[/] ({prep.shown}) on {prep.ctx.installed.label()}, "
        f"{prep.ctx.hardware.describe()}; storage {redacted(prep.storage_url)}{sampling}"
    )
    # The terminal shows the study as it runs; optuna-dashboard gets each trial's diagnosis and note.
    runner = StudyRunner(
        prep,
        opts,
        observers=[StudyProgress(console), DashboardPublisher()],
        coordination=Coordination(db_outage_s=args.db_outage_s),
    )
    try:
        result = runner.run(search=searching)
    except KeyboardInterrupt:
        console.print(
            "[yellow]interrupted[/]: no server is left running; run the same command to "
            "continue where the study stopped"
        )
        return 130
    return finish_outputs(console, result.storage_url, result.study_name, result.run_dir)


def _dry_run(prep, opts, console) -> int:
    """`autotune search --dry-run`: the study's plan and cost, starting nothing."""
    from rich.markup import escape

    from search.study.dry_run import plan_lines

    console.print(f"dry run of study [bold]{prep.study_name}[/] ({prep.shown}): nothing started")
    for line in plan_lines(prep, opts):
        console.print(f"  {escape(line)}")
    return 0


def study_options(args: argparse.Namespace) -> StudyOptions:
    """The options of `autotune search` and `autotune confirm` (which has no budget, sampler,
    seed, calibration, warm start or price flags: their defaults)."""
    from search.prepare import StudyOptions

    return StudyOptions(
        scenario=args.scenario,
        trials=getattr(args, "trials", None),
        timeout_min=getattr(args, "timeout_min", None),
        model=args.model,
        storage=args.storage,
        study_name=args.study,
        sampler=getattr(args, "sampler", None),
        seed=getattr(args, "seed", 0),
        runs_dir=Path(args.runs_dir),
        confirm_runs=args.confirm_runs,
        recalibrate=getattr(args, "recalibrate", False),
        warm_start=getattr(args, "warm_start", None),
        usd_per_hour=getattr(args, "usd_per_hour", None),
    )


def _cmd_search_workers(args: argparse.Namespace, opts: StudyOptions) -> int:
    """`autotune search --workers N`: N `autotune worker` processes on disjoint device slots, then
    (on all of them again) the confirmation phase and the outputs (`app.parallel`)."""
    from rich.markup import escape

    from app.parallel import WorkersStopped, search_on_workers

    console = make_console()
    try:
        prep = search_on_workers(
            opts,
            args.workers,
            console,
            backend=args.backend,
            ray_address=args.ray_address,
            db_outage_s=args.db_outage_s,
        )
    except WorkersStopped as e:
        console.print(
            f"[red]workers stopped early[/]: {escape(str(e))}; run the same command to continue where the study stopped"
        )
        return 130 if e.interrupted else 1
    return finish_outputs(console, prep.storage_url, prep.study_name, prep.run_dir)


def _cmd_worker(args: argparse.Namespace) -> int:
    """`autotune worker`: one more worker on an existing study, from any host that reaches its
    database: the scenario, model and budget are the study's own unless given here."""
    from app.parallel import run_worker
    from app.workers import Slot

    options = _worker_options(args)
    console = make_console()
    try:
        result = run_worker(options, console, slot=Slot.parse(args.slot) if args.slot else None)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]: no server is left running; its trial goes to the other workers")
        return 130
    console.print(f"worker done: {result.finished} finished trials in the study")
    return 0


def _worker_options(args: argparse.Namespace) -> WorkerOptions:
    """The worker's options: as `autotune search --workers N` handed them over (`--options`), or
    from the flags of a worker started by hand, which must name the study (`--storage`, `--study`)."""
    from app.worker_options import WorkerOptions

    flags = {
        "storage": args.storage,
        "study": args.study,
        "runs_dir": Path(args.runs_dir),
        "scenario": args.scenario,
        "model": args.model,
        "trials": args.trials,
        "timeout_min": args.timeout_min,
        "sampler": args.sampler,
        "seed": args.seed,
        "db_outage_s": args.db_outage_s,
    }
    if args.options is not None:
        given = [k for k, v in flags.items() if v is not None and v != WorkerOptions.model_fields[k].default]
        if given:
            args.usage_error(f"--options holds every option; drop {', '.join(_flag(k) for k in given)}")
        return args.options
    missing = [_flag(k) for k in ("storage", "study") if flags[k] is None]
    if missing:
        args.usage_error(f"the following arguments are required: {', '.join(missing)}")
    return WorkerOptions.model_validate(flags)


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def _worker_options_arg(text: str) -> WorkerOptions:
    """`--options`: a worker's options as JSON (`app.workers.worker_argv` writes them)."""
    from pydantic import ValidationError

    from app.worker_options import WorkerOptions

    try:
        return WorkerOptions.model_validate_json(text)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise argparse.ArgumentTypeError(
            f"not a worker's options: {where + ': ' if where else ''}{first['msg']}"
        ) from None


def register_search(sub) -> None:
    search = sub.add_parser("search", help="run (or resume) a study: restart vLLM per trial, keep every trial")
    add_study_target(search, scenario_required=True)
    _add_budget_args(search)
    _add_study_start_args(search)
    _add_worker_args(search)
    search.add_argument(
        "--dry-run",
        action="store_true",
        help="print the study's plan (each stage's requests, their seconds on this machine from a stored "
        "calibration, a trial, the study) and start nothing",
    )
    add_db_outage(search)
    search.set_defaults(func=_cmd_search)


def _add_budget_args(search: argparse.ArgumentParser) -> None:
    """What the search spends and samples with: its budget, the sampler and its seed, the confirmation's runs."""
    from search.samplers import DEFAULT_SAMPLER, SAMPLERS

    search.add_argument(
        "--trials", type=positive_int, default=None, help="budget in finished trials (baselines included)"
    )
    search.add_argument(
        "--timeout-min",
        type=minutes,
        default=None,
        help="wall-time budget of the whole study: after calibration the plan fits as many trials as its "
        "cost allows beside the confirmation, and says so",
    )
    search.add_argument(
        "--sampler",
        default=None,
        choices=list(SAMPLERS),
        help=f"default: the scenario's default_sampler, else {DEFAULT_SAMPLER}",
    )
    search.add_argument("--seed", type=int, default=0)
    search.add_argument(
        "--confirm-runs",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="runs per candidate in the confirmation phase after the search "
        "(default: the scenario's confirmation.runs, 3); 0 skips the phase",
    )


def _add_study_start_args(search: argparse.ArgumentParser) -> None:
    """How a study begins: a new calibration, an earlier study to start from, the hardware's price."""
    search.add_argument(
        "--recalibrate",
        action="store_true",
        help="measure the calibration again; refused once the study has trials (start a new one with --study NEW_NAME)",
    )
    search.add_argument(
        "--warm-start",
        default=None,
        type=study_name,
        metavar="STUDY",
        help="an earlier study in the same storage, on the same model, vLLM build and machine: its "
        "winner is enqueued and its trials inform the TPE sampler; nothing of it is copied, "
        "everything is measured again (refused, saying what differs, otherwise)",
    )
    search.add_argument(
        "--usd-per-hour",
        type=positive_float,
        default=None,
        metavar="USD",
        help="the price of the hardware one server uses, per hour (a TP-4 server: four GPUs' price), over "
        "the scenario's cost.usd_per_hour; kept with the study: the summary, best.yaml and the report "
        "quote the cost per million output tokens and requests at the capacity under the SLO",
    )


def _add_worker_args(search: argparse.ArgumentParser) -> None:
    """Trials in parallel: how many workers, and where they run."""
    search.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        metavar="N",
        help="trials in parallel: N worker processes, each on its own GPUs or CPU cores "
        "(needs a --storage database server: make db)",
    )
    search.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help="with --workers: local processes here, or one Ray task per slot on a Ray cluster "
        "(pip install -e '.[ray]')",
    )
    search.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="an existing Ray cluster for --backend ray (default: a local Ray instance)",
    )


def register_worker(sub) -> None:
    from search.samplers import DEFAULT_SAMPLER, SAMPLERS

    worker = sub.add_parser(
        "worker",
        help="join an existing study as one more worker, from any host that "
        "reaches its database (what a cluster scheduler starts)",
    )
    # --storage and --study are required unless --options (what `autotune search --workers N`
    # hands each worker) names the study: `_worker_options` says which are missing.
    worker.add_argument("--storage", default=None, help="the study's database URL (postgresql+psycopg://...); required")
    worker.add_argument("--study", default=None, type=study_name, help="the study's name; required")
    worker.add_argument("--options", default=None, type=_worker_options_arg, help=argparse.SUPPRESS)
    worker.add_argument("--runs-dir", default=str(DEFAULT_RUNS_DIR), help="where this worker's logs go")
    worker.add_argument(
        "--slot",
        default=None,
        metavar="cpu:IDS|gpu:IDS",
        help="the devices this worker owns, e.g. gpu:2,3 or cpu:0-7 (default: all it sees)",
    )
    worker.add_argument("--scenario", default=None, help="the scenario file (default: the study's, as stored)")
    worker.add_argument("--model", default=None, help="local model directory or Hugging Face id (default: the study's)")
    worker.add_argument("--trials", type=positive_int, default=None, help="the study's budget (default: as stored)")
    worker.add_argument("--timeout-min", type=minutes, default=None)
    worker.add_argument(
        "--sampler",
        default=None,
        choices=list(SAMPLERS),
        help=f"default: the scenario's default_sampler, else {DEFAULT_SAMPLER}",
    )
    worker.add_argument("--seed", type=int, default=None, help="the sampler's seed (default: the process id)")
    add_db_outage(worker)
    worker.set_defaults(func=_cmd_worker, usage_error=worker.error)


def register_confirm(sub) -> None:
    confirm = sub.add_parser(
        "confirm",
        help="the confirmation phase alone on an existing study: re-measure the front's best and "
        "the baselines, interleaved, and decide on the confirmed values (resumes)",
    )
    add_study_target(confirm, scenario_required=True)
    confirm.add_argument(
        "--confirm-runs",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="runs per candidate (default: the scenario's confirmation.runs, 3)",
    )
    add_db_outage(confirm)
    confirm.set_defaults(func=_cmd_search)
