"""The commands that run a study: `autotune search` (one process or many workers), `autotune worker`
(one more worker on a stored study) and `autotune confirm` (the confirmation phase alone)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from app.cli.arg_types import minutes, non_negative_int, positive_float, positive_int
from app.cli.study_target import add_db_outage, add_study_target, named_study, study_name
from app.cli.terminal import finish_outputs, make_console
from search.disk import DEFAULT_RUNS_DIR

if TYPE_CHECKING:
    from rich.console import Console

    from app.cli.arg_types import Subcommands
    from app.parallel import SearchOptions
    from app.worker_options import WorkerOptions
    from app.workers import Slot
    from search.prepare import Prepared


def search_options(args: argparse.Namespace) -> SearchOptions:
    """`autotune search`'s options."""
    from app.parallel import SearchOptions

    study = replace(
        named_study(args),
        trials=args.trials,
        timeout_min=args.timeout_min,
        sampler=args.sampler,
        seed=args.seed,
        confirm_runs=args.confirm_runs,
        recalibrate=args.recalibrate,
        warm_start=args.warm_start,
        usd_per_hour=args.usd_per_hour,
    )
    return SearchOptions(
        study,
        workers=args.workers,
        backend=args.backend,
        ray_address=args.ray_address,
        db_outage_s=args.db_outage_s,
        dry_run=args.dry_run,
    )


def confirm_options(args: argparse.Namespace) -> SearchOptions:
    """`autotune confirm`'s options: the study's budget, sampler, seed, calibration, warm start
    and price at their defaults (it takes no flags for them)."""
    from app.parallel import SearchOptions

    study = replace(named_study(args), confirm_runs=args.confirm_runs)
    return SearchOptions(study, search=False, db_outage_s=args.db_outage_s)


def _cmd_search(args: argparse.Namespace) -> int:
    return run_search(search_options(args))


def _cmd_confirm(args: argparse.Namespace) -> int:
    return run_search(confirm_options(args))


def run_search(options: SearchOptions) -> int:
    """`autotune search`: the search, then the confirmation phase; `autotune confirm`: the phase
    alone (`options.search` False)."""
    from app.parallel import run_here, study_line
    from search.prepare import prepare

    opts = options.study
    if options.search and options.workers > 1 and not options.dry_run:  # a dry run starts nothing
        if opts.warm_start:
            from search.study import StudyMismatch

            raise StudyMismatch(
                "--warm-start runs in one process: drop --workers, or warm-start first and add "
                "workers to the study with `autotune worker`"
            )
        return _search_on_workers(options)
    console = make_console()
    prep = prepare(opts)  # every check before any server starts
    if options.search and options.dry_run:
        return _dry_run(prep, options, console)
    if not options.search:
        from storage.queries import existing_study_check

        existing_study_check(prep.storage_url, prep.study_name, f"run `autotune search {opts.scenario}` first")
    sampling = f"; sampler {prep.sampler}" if options.search else ""
    console.print(f"{study_line(prep)}{sampling}")
    try:
        result = run_here(prep, options, console)
    except KeyboardInterrupt:
        console.print(
            "[yellow]interrupted[/]: no server is left running; run the same command to "
            "continue where the study stopped"
        )
        return 130
    return finish_outputs(console, result.storage_url, result.study_name, result.run_dir)


def _dry_run(prep: Prepared, options: SearchOptions, console: Console) -> int:
    """`autotune search --dry-run`: the study's plan and cost, starting nothing."""
    from rich.markup import escape

    from search.study.dry_run import plan_lines

    console.print(f"dry run of study [bold]{prep.study_name}[/] ({prep.shown}): nothing started")
    for line in plan_lines(prep, options.study):
        console.print(f"  {escape(line)}")
    return 0


def _search_on_workers(options: SearchOptions) -> int:
    """`autotune search --workers N`: N `autotune worker` processes on disjoint device slots, then
    (on all of them again) the confirmation phase and the outputs (`app.parallel`)."""
    from rich.markup import escape

    from app.parallel import WorkersStopped, search_on_workers

    console = make_console()
    try:
        prep = search_on_workers(options, console)
    except WorkersStopped as e:
        console.print(
            f"[red]workers stopped early[/]: {escape(str(e))}; run the same command to continue where the study stopped"
        )
        return 130 if e.interrupted else 1
    return finish_outputs(console, prep.storage_url, prep.study_name, prep.run_dir)


@dataclass(frozen=True)
class WorkerCommandOptions:
    """`autotune worker`'s options: the worker's own (`WorkerOptions`, what `autotune search
    --workers N` hands over whole), and the devices it owns (`--slot`, apart from them: on Ray it
    is rewritten to the GPUs the task was given)."""

    worker: WorkerOptions
    slot: Slot | None = None


def _cmd_worker(args: argparse.Namespace) -> int:
    """`autotune worker`: one more worker on an existing study, from any host that reaches its
    database: the scenario, model and budget are the study's own unless given here."""
    from app.parallel import run_worker

    options = worker_command_options(args)
    console = make_console()
    try:
        result = run_worker(options.worker, console, slot=options.slot)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]: no server is left running; its trial goes to the other workers")
        return 130
    console.print(f"worker done: {result.finished} finished trials in the study")
    return 0


def worker_command_options(args: argparse.Namespace) -> WorkerCommandOptions:
    from app.workers import Slot

    return WorkerCommandOptions(_worker_options(args), Slot.parse(args.slot) if args.slot else None)


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
        options: WorkerOptions = args.options
        return options
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


def register_search(sub: Subcommands) -> None:
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
        help="wall-time budget of the whole study: after calibration the plan says how many trials fit "
        "beside the confirmation; the search then goes on while the next trial fits at the measured pace",
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


def register_worker(sub: Subcommands) -> None:
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


def register_confirm(sub: Subcommands) -> None:
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
    confirm.set_defaults(func=_cmd_confirm)
