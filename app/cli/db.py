"""`autotune db`: the project's local PostgreSQL, for studies that many workers share."""

from __future__ import annotations

import argparse
from pathlib import Path

from search.disk import DEFAULT_RUNS_DIR


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


def register(sub) -> None:
    db = sub.add_parser("db", help="a local PostgreSQL for studies that many workers share (RUNS_DIR/postgres)")
    db.add_argument(
        "db_command",
        choices=("start", "stop", "url"),
        help="start (initialise on first use; prints the STORAGE URL), stop, or print the URL",
    )
    db.add_argument("--runs-dir", default=str(DEFAULT_RUNS_DIR))
    db.set_defaults(func=_cmd_db)
