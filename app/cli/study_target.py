"""The options that name a stored study (scenario, model, storage, study name, runs directory)
and the database outage bound, as every command that runs or reads a study takes them, and the
stored study they name."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from app.cli.arg_types import non_negative_int
from search.disk import DEFAULT_RUNS_DIR

if TYPE_CHECKING:
    from search.prepare import StudyOptions

DEFAULT_STORAGE_HELP = f"SQLAlchemy URL (default: sqlite:///{DEFAULT_RUNS_DIR}/autotune.db)"


def study_name(text: str) -> str:
    from search.scenario import SAFE_NAME_RULE, is_safe_name

    if not is_safe_name(text):
        raise argparse.ArgumentTypeError(f"{text!r}: {SAFE_NAME_RULE} (it names a directory under --runs-dir)")
    return text


def add_study_target(p: argparse.ArgumentParser, scenario_required: bool = False) -> None:
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
    p.add_argument("--storage", default=None, help=DEFAULT_STORAGE_HELP)
    p.add_argument("--study", default=None, type=study_name, help="study name (default: scenario[-model])")
    p.add_argument("--runs-dir", default=str(DEFAULT_RUNS_DIR), help="where logs, exports and the default database go")


def add_db_outage(p: argparse.ArgumentParser) -> None:
    from search.study.coordination import DEFAULT_BOUND_S

    p.add_argument(
        "--db-outage-s",
        type=non_negative_int,
        default=DEFAULT_BOUND_S,
        metavar="S",
        help="how long to wait for a database that went away (a restart, a failover) before the "
        f"study stops; what is measured meanwhile is kept (default: {DEFAULT_BOUND_S})",
    )


def named_study(args: argparse.Namespace) -> StudyOptions:
    """The study that `add_study_target`'s flags name, its other options at their defaults: what
    export, report and dashboard read, and what search and confirm add their own options to."""
    from search.prepare import StudyOptions

    return StudyOptions(
        scenario=args.scenario,
        model=args.model,
        storage=args.storage,
        study_name=args.study,
        runs_dir=Path(args.runs_dir),
    )


def stored_study(opts: StudyOptions, whole_database: bool = False) -> tuple[str, str]:
    """The stored study that export and report read (`whole_database`: the database the
    dashboard serves, that study or not): its storage URL and name; refused, creating no
    database file (as a mistyped --storage would), unless it is there."""
    from search.prepare import default_storage, default_study_name
    from storage.database import check_url, existing_database_check
    from storage.queries import existing_study_check

    storage = default_storage(opts.runs_dir) if opts.storage is None else opts.storage  # "" is refused
    check_url(storage)
    if opts.study_name:
        name = opts.study_name
    else:
        from search import scenario as scenario_mod

        # The study is named after the scenario's `name:`, as `search` names it, also when the
        # scenario is given as a path.
        name = default_study_name(scenario_mod.load(opts.scenario)[0].name, opts.model)
    hint = f"run `autotune search {opts.scenario}` first"
    existing_database_check(storage, hint) if whole_database else existing_study_check(storage, name, hint)
    return storage, name
