"""`autotune`: the command line. Each subcommand imports what it needs, nothing more."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from search import load_command  # `autotune load`; imports what it runs only when run
from search.arg_types import minutes, non_negative_int, port_number, positive_int

EXIT_OUTPUT_MISSING = 3  # an output file was not written (a study's: stored, `autotune export` writes them again)
EXIT_CODES = f"""exit codes:
  0    done
  1    the study stopped (a calibration that failed, the load generator failing every trial, too
       little free space for one more trial): what it stored stays; run the same command to go on
  2    bad input (scenario, flags, storage, a study another process runs): nothing started
  {EXIT_OUTPUT_MISSING}    an output file was not written (disk full, permission); the one it replaces is unchanged.
       After a study, the study is stored: `autotune export SCENARIO` writes best.yaml,
       pareto.yaml and report.html again
  130  interrupted (Ctrl-C): no server is left; run the same command to go on"""


def _cmd_model_build(args: argparse.Namespace) -> int:
    from serving import build_default_model

    path = build_default_model(force=args.force)
    if not args.quiet:
        print(path)
    return 0


def _cmd_model_dummy(args: argparse.Namespace) -> int:
    from serving import build_dummy_architecture

    print(build_dummy_architecture(Path(args.config), Path(args.out)))
    return 0


def _console():
    """Rich's console; 160 columns when the output goes to a file or a pipe (rich would assume
    80 and fold the summary's parameter column into fragments)."""
    import sys

    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=160)


def _cmd_params(args: argparse.Namespace) -> int:
    """What a scenario may set: the tunable parameters (which the installed vLLM takes, and what
    happens to the others) and the allow list of pass-through flags."""
    from rich.table import Table

    from serving import PARAMS, PASS_THROUGH, launch_context, unsupported_reason

    ctx = launch_context(model=args.model)
    on = f"{ctx.installed.label()} ({ctx.hardware.describe()})"
    table = Table(title=f"Tunable parameters on {on}: search_space, server.fixed, baselines")
    for col in ("parameter", "flag", "type", "what it does", "installed vLLM"):
        table.add_column(col)
    for spec in PARAMS:
        reason = unsupported_reason(spec, ctx)
        flag = spec.flag or ("--gpu-memory-utilization" if ctx.hardware.is_gpu else "--kv-cache-memory-bytes")
        table.add_row(spec.name, flag, spec.kind, spec.doc, "accepted" if reason is None else reason)
    flags = Table(
        title=f"Pass-through flags on {on}: server.fixed, baselines",
        caption="A scenario that sets any other flag is refused when it is read.",
    )
    for col in ("key", "flag", "what it does", "installed vLLM"):
        flags.add_column(col)
    for name, why in PASS_THROUGH.items():
        flag = "--" + name.replace("_", "-")
        flags.add_row(
            name, flag, why, "accepted" if ctx.installed.accepts(flag) else "not a flag: refused before start"
        )
    console = _console()
    console.print(table)
    console.print(flags)
    return 0


def _cmd_db(args: argparse.Namespace) -> int:
    """The project's local PostgreSQL, for studies shared by many workers: start prints the URL."""
    from storage.local_postgres import LocalPostgres

    db = LocalPostgres(Path(args.runs_dir) / "postgres")
    if args.db_command == "start":
        print(db.start())
    elif args.db_command == "stop":
        db.stop()
    else:
        print(db.url())
    return 0


def user_errors() -> tuple[type[Exception], ...]:
    """Errors that mean bad input: printed as one clear message, exit code 2, no traceback (here
    and in the benchmark scripts that take a scenario)."""
    from search.scenario import ScenarioError
    from search.space import SpaceError
    from search.study import StudyBusy, StudyMismatch
    from search.workers import SlotError
    from serving import ConfigError, ModelError, VllmNotInstalled
    from storage.local_postgres import PostgresError
    from storage.queries import StorageError

    return (
        ScenarioError,
        ConfigError,
        SpaceError,
        ModelError,
        VllmNotInstalled,
        LookupError,
        StudyBusy,
        StudyMismatch,
        StorageError,
        PostgresError,
        SlotError,
    )


def reported(prog: str, run: Callable[[], int], also: tuple[type[Exception], ...] = ()) -> int:
    """`run()` for a script beside the CLI (the benchmarks that take a scenario or a landscape):
    bad input (`user_errors`, and `also`) one line and exit code 2, a study that cannot go on one
    line and exit code 1, as `autotune` does."""
    try:
        return run()
    except (*user_errors(), *also) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except _study_stopped() as e:
        print(f"{prog}: stopped: {e}", file=sys.stderr)
        return 1


def _study_target(args: argparse.Namespace, whole_database: bool = False) -> tuple[str, str]:
    """The stored study that export and report read (`whole_database`: the database the
    dashboard serves, that study or not); refused, creating no database file (as a mistyped
    --storage would), unless it is there."""
    from search.prepare import default_storage, default_study_name
    from storage.queries import check_url, existing_database_check, existing_study_check

    storage = default_storage(Path(args.runs_dir)) if args.storage is None else args.storage  # "" is refused
    check_url(storage)
    if args.study:
        name = args.study
    else:
        from search import scenario as scenario_mod

        # The study is named after the scenario's `name:`, as `search` names it, also when the
        # scenario is given as a path.
        name = default_study_name(scenario_mod.load(args.scenario)[0].name, args.model)
    hint = f"run `autotune search {args.scenario}` first"
    existing_database_check(storage, hint) if whole_database else existing_study_check(storage, name, hint)
    return storage, name


def _cmd_search(args: argparse.Namespace) -> int:
    """`autotune search`: the search, then the confirmation phase; `autotune confirm`: the phase alone."""
    from search.outputs import DashboardPublisher, StudyProgress
    from search.prepare import StudyOptions, prepare
    from search.study import StudyRunner
    from search.study.coordination import Coordination
    from storage.url import redacted

    searching = args.command == "search"
    if searching and args.workers > 1:
        if args.warm_start:
            from search.study import StudyMismatch

            raise StudyMismatch(
                "--warm-start runs in one process: drop --workers, or warm-start first and add "
                "workers to the study with `autotune worker`"
            )
        return _cmd_search_workers(args)
    opts = StudyOptions(
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
    )
    console = _console()
    prep = prepare(opts)  # every check before any server starts
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
    return _finish(console, result.storage_url, result.study_name, result.run_dir)


def _cmd_search_workers(args: argparse.Namespace) -> int:
    """`autotune search --workers N`: N `autotune worker` processes on disjoint device slots, then
    (on all of them again) the confirmation phase and the outputs (`search.parallel`)."""
    from rich.markup import escape

    from search.parallel import WorkersStopped, search_on_workers
    from search.prepare import StudyOptions

    opts = StudyOptions(
        scenario=args.scenario,
        trials=args.trials,
        timeout_min=args.timeout_min,
        model=args.model,
        storage=args.storage,
        study_name=args.study,
        sampler=args.sampler,
        seed=args.seed,
        runs_dir=Path(args.runs_dir),
        confirm_runs=args.confirm_runs,
    )
    console = _console()
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
    return _finish(console, prep.storage_url, prep.study_name, prep.run_dir)


def _cmd_worker(args: argparse.Namespace) -> int:
    """`autotune worker`: one more worker on an existing study, from any host that reaches its
    database: the scenario, model and budget are the study's own unless given here."""
    from search.parallel import run_worker
    from search.workers import Slot

    console = _console()
    try:
        result = run_worker(
            args.storage,
            args.study,
            Path(args.runs_dir),
            console,
            slot=Slot.parse(args.slot) if args.slot else None,
            scenario=args.scenario,
            model=args.model,
            trials=args.trials,
            timeout_min=args.timeout_min,
            sampler=args.sampler,
            seed=args.seed,
            db_outage_s=args.db_outage_s,
        )
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]: no server is left running; its trial goes to the other workers")
        return 130
    console.print(f"worker done: {result.finished} finished trials in the study")
    return 0


def _finish(console, storage_url: str, study_name: str, out_dir: Path) -> int:
    from search.outputs import finish

    finish(console, storage_url, study_name, out_dir)
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    storage, name = _study_target(args)
    out = Path(args.out) if args.out else Path(args.runs_dir) / name
    return _finish(_console(), storage, name, out)


def _cmd_dashboard(args: argparse.Namespace) -> int:
    from search.outputs import publish_and_serve  # figures and notes, then serves on 127.0.0.1

    storage, name = _study_target(args, whole_database=True)
    return publish_and_serve(storage, name, port=args.port)


def _cmd_report(args: argparse.Namespace) -> int:
    from search.outputs import REPORT_NAME, write_report

    storage, name = _study_target(args)
    out = Path(args.out) if args.out else Path(args.runs_dir) / name / REPORT_NAME
    print(f"report: {write_report(storage, name, out)}")
    return 0


def _study_name(text: str) -> str:
    from search.scenario import SAFE_NAME_RULE, is_safe_name

    if not is_safe_name(text):
        raise argparse.ArgumentTypeError(f"{text!r}: {SAFE_NAME_RULE} (it names a directory under --runs-dir)")
    return text


def _add_db_outage(p: argparse.ArgumentParser) -> None:
    from search.study.outage import DEFAULT_BOUND_S

    p.add_argument(
        "--db-outage-s",
        type=non_negative_int,
        default=DEFAULT_BOUND_S,
        metavar="S",
        help="how long to wait for a database that went away (a restart, a failover) before the "
        f"study stops; what is measured meanwhile is kept (default: {DEFAULT_BOUND_S})",
    )


def _add_study_target(p: argparse.ArgumentParser, scenario_required: bool = False) -> None:
    p.add_argument(
        "scenario",
        nargs=None if scenario_required else "?",
        default="mixed",
        help="scenario name (configs/NAME.yaml) or path to a scenario file",
    )
    p.add_argument(
        "--model",
        default=None,
        help="local model directory, or Hugging Face id org/name[@revision] "
        "found in the local cache (default: the built-in model)",
    )
    p.add_argument("--storage", default=None, help="SQLAlchemy URL (default: sqlite:///runs/autotune.db)")
    p.add_argument("--study", default=None, type=_study_name, help="study name (default: scenario[-model])")
    p.add_argument("--runs-dir", default="runs", help="where logs, exports and the default database go")


def build_parser() -> argparse.ArgumentParser:
    from search.samplers import DEFAULT_SAMPLER, SAMPLERS

    parser = argparse.ArgumentParser(
        prog="autotune", description=__doc__, epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    model = sub.add_parser("model", help="the built-in default model")
    model_sub = model.add_subparsers(dest="model_command", required=True)
    build = model_sub.add_parser("build", help="build (or reuse) the default local model; prints its path")
    build.add_argument("--force", action="store_true")
    build.add_argument("--quiet", action="store_true")
    build.set_defaults(func=_cmd_model_build)
    dummy = model_sub.add_parser(
        "dummy",
        help="a real architecture's config.json + the local tokenizer, no weights "
        "(served with --load-format dummy; for GPUs)",
    )
    dummy.add_argument("--config", required=True, help="path to the architecture's config.json")
    dummy.add_argument("--out", required=True, help="directory to write (then: MODEL=that directory)")
    dummy.set_defaults(func=_cmd_model_dummy)

    search = sub.add_parser("search", help="run (or resume) a study: restart vLLM per trial, keep every trial")
    _add_study_target(search, scenario_required=True)
    search.add_argument(
        "--trials", type=positive_int, default=None, help="budget in finished trials (baselines included)"
    )
    search.add_argument(
        "--timeout-min",
        type=minutes,
        default=None,
        help="wall-time budget of the search phase (the confirmation phase follows it)",
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
    search.add_argument(
        "--recalibrate",
        action="store_true",
        help="measure the calibration again; refused once the study has trials (start a new one with --study NEW_NAME)",
    )
    search.add_argument(
        "--warm-start",
        default=None,
        type=_study_name,
        metavar="STUDY",
        help="an earlier study in the same storage, on the same model, vLLM build and machine: its "
        "winner is enqueued and its trials inform the TPE sampler; nothing of it is copied, "
        "everything is measured again (refused, saying what differs, otherwise)",
    )
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
    _add_db_outage(search)
    search.set_defaults(func=_cmd_search)

    worker = sub.add_parser(
        "worker",
        help="join an existing study as one more worker, from any host that "
        "reaches its database (what a cluster scheduler starts)",
    )
    worker.add_argument("--storage", required=True, help="the study's database URL (postgresql+psycopg://...)")
    worker.add_argument("--study", required=True, type=_study_name)
    worker.add_argument("--runs-dir", default="runs", help="where this worker's logs go")
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
    _add_db_outage(worker)
    worker.set_defaults(func=_cmd_worker)

    confirm = sub.add_parser(
        "confirm",
        help="the confirmation phase alone on an existing study: re-measure the front's best and "
        "the baselines, interleaved, and decide on the confirmed values (resumes)",
    )
    _add_study_target(confirm, scenario_required=True)
    confirm.add_argument(
        "--confirm-runs",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="runs per candidate (default: the scenario's confirmation.runs, 3)",
    )
    _add_db_outage(confirm)
    confirm.set_defaults(func=_cmd_search)

    exp = sub.add_parser(
        "export",
        help="write best.yaml (for vllm serve --config), pareto.yaml and report.html again from the stored study",
    )
    _add_study_target(exp)
    exp.add_argument("--out", default=None, help="directory (default: runs/STUDY)")
    exp.set_defaults(func=_cmd_export)

    dash = sub.add_parser("dashboard", help="optuna-dashboard on the study database, bound to 127.0.0.1")
    _add_study_target(dash)
    dash.add_argument("--port", type=port_number, default=8080, help="on 127.0.0.1 (make dashboard PORT=)")
    dash.set_defaults(func=_cmd_dashboard)

    params = sub.add_parser(
        "params",
        help="what a scenario may set: the tunable parameters and the allowed "
        "pass-through flags, on the installed vLLM",
    )
    params.add_argument("--model", default=None, help="local model directory or Hugging Face id org/name[@revision]")
    params.set_defaults(func=_cmd_params)
    load_command.register(sub)

    report = sub.add_parser("report", help="write the study's self-contained HTML report (plotly, offline)")
    _add_study_target(report)
    report.add_argument("--out", default=None, help="file (default: RUNS_DIR/STUDY/report.html)")
    report.set_defaults(func=_cmd_report)

    db = sub.add_parser("db", help="a local PostgreSQL for studies that many workers share (RUNS_DIR/postgres)")
    db.add_argument(
        "db_command",
        choices=("start", "stop", "url"),
        help="start (initialise on first use; prints the STORAGE URL), stop, or print the URL",
    )
    db.add_argument("--runs-dir", default="runs")
    db.set_defaults(func=_cmd_db)
    return parser


def _study_stopped() -> type[Exception]:
    """A study that cannot go on (not bad input): one line, exit code 1; what it stored stays."""
    from search.study import StudyStopped

    return StudyStopped


def _output_not_written() -> type[Exception]:
    from search.disk import OutputNotWritten

    return OutputNotWritten


def _not_written_line(args: argparse.Namespace, e) -> str:
    """The file, why, the free space; after a study, that it is stored and the command that
    writes its outputs again (`autotune export` with this command's study)."""
    if args.command not in ("search", "confirm", "export", "report"):
        return f"not written: {e}"
    import shlex

    from storage.url import redacted

    command = ["autotune", "export", args.scenario]
    for flag, value in (
        ("--model", args.model),
        ("--storage", args.storage and redacted(args.storage)),
        ("--study", args.study),
        ("--runs-dir", args.runs_dir),
        ("--out", args.out if args.command == "export" else None),
    ):
        if value is not None:
            command += [flag, str(value)]
    fix = "make room" if e.disk_full else "fix that"
    return (
        f"the study is stored, but an output was not written: {e}; {fix}, then `{shlex.join(command)}` "
        f"writes best.yaml, pareto.yaml and report.html again"
    )


def _database_away(e: Exception) -> str | None:
    """What the database said, if `e` means it is away (outside the steps a study rides out: its
    start, the outputs at its end)."""
    from storage.connection import connection_lost

    return connection_lost(e)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except user_errors() as e:
        print(f"autotune: error: {e}", file=sys.stderr)
        return 2
    except _study_stopped() as e:
        print(f"autotune: stopped: {e}", file=sys.stderr)
        return 1
    except _output_not_written() as e:
        print(f"autotune: {_not_written_line(args, e)}", file=sys.stderr)
        return EXIT_OUTPUT_MISSING
    except Exception as e:
        if (reason := _database_away(e)) is None:
            raise
        print(
            f"autotune: stopped: the database is unreachable ({reason}); what is stored stays stored. "
            f"Once it is back, run the same command to go on",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
