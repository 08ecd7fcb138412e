"""`autotune`: the command line. Each subcommand imports what it needs, nothing more."""

# One module per command group; app.expected_errors says how a failure ends any of them. Heavy
# imports are made inside the commands, so `autotune --help` stays fast.

from __future__ import annotations

import argparse
import sys

from app.cli import db, default_model, load, outputs, params, studies, trace
from app.expected_errors import (
    EXIT_CODES,
    EXIT_OUTPUT_MISSING,
    database_away,
    not_written_line,
    output_not_written,
    study_stopped,
    user_errors,
)

__all__ = ["EXIT_CODES", "EXIT_OUTPUT_MISSING", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """Every subcommand, in the order `autotune --help` lists them."""
    parser = argparse.ArgumentParser(
        prog="autotune", description=__doc__, epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    default_model.register(sub)
    studies.register_search(sub)
    studies.register_worker(sub)
    studies.register_confirm(sub)
    trace.register_tune(sub)
    outputs.register_export(sub)
    outputs.register_dashboard(sub)
    params.register(sub)
    load.register(sub)
    trace.register_scenario(sub)
    outputs.register_report(sub)
    db.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except user_errors() as e:
        print(f"autotune: error: {e}", file=sys.stderr)
        return 2
    except study_stopped() as e:
        print(f"autotune: stopped: {e}", file=sys.stderr)
        return 1
    except output_not_written() as e:
        print(f"autotune: {not_written_line(args, e)}", file=sys.stderr)
        return EXIT_OUTPUT_MISSING
    except Exception as e:
        if (reason := database_away(e)) is None:
            raise
        print(
            f"autotune: stopped: the database is unreachable ({reason}); what is stored stays stored. "
            f"Once it is back, run the same command to go on",
            file=sys.stderr,
        )
        return 1
