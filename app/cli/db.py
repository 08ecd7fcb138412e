"""`autotune db`: the project's local PostgreSQL, for studies that many workers share."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from search.disk import DEFAULT_RUNS_DIR

if TYPE_CHECKING:
    from app.cli.arg_types import Subcommands


@dataclass(frozen=True)
class DbOptions:
    """`autotune db`: start, stop or url, of the cluster under RUNS_DIR/postgres."""

    action: str
    runs_dir: Path = DEFAULT_RUNS_DIR


def db_options(args: argparse.Namespace) -> DbOptions:
    return DbOptions(args.db_command, Path(args.runs_dir))


def _cmd_db(args: argparse.Namespace) -> int:
    """The project's local PostgreSQL, for studies shared by many workers: start prints the URL."""
    from storage.local_postgres import LocalPostgres

    opts = db_options(args)
    db = LocalPostgres(opts.runs_dir / "postgres")
    if opts.action == "start":
        print(db.start())
    elif opts.action == "stop":
        db.stop()
    else:
        print(db.url())
    return 0


def register(sub: Subcommands) -> None:
    db = sub.add_parser("db", help="a local PostgreSQL for studies that many workers share (RUNS_DIR/postgres)")
    db.add_argument(
        "db_command",
        choices=("start", "stop", "url"),
        help="start (initialise on first use; prints the STORAGE URL), stop, or print the URL",
    )
    db.add_argument("--runs-dir", default=str(DEFAULT_RUNS_DIR))
    db.set_defaults(func=_cmd_db)
