"""The errors a command expects, and how one ends on them: bad input is one line on stderr and exit
code 2, a study that cannot go on one line and exit code 1, an output not written one line and
exit code 3, the database away one line and exit code 1; never a traceback. `autotune` (app.cli,
whose `--help` lists the codes: `EXIT_CODES`) and the benchmark scripts (`reported`) share them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from search.disk import OutputNotWritten

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


def user_errors() -> tuple[type[Exception], ...]:
    """Errors that mean bad input: printed as one clear message, exit code 2, no traceback (here
    and in the benchmark scripts that take a scenario)."""
    from app.workers import SlotError
    from search.scenario import ScenarioError
    from search.space import SpaceError
    from search.study import StudyBusy, StudyMismatch
    from serving import ConfigError, ModelError, VllmNotInstalled
    from storage.database import StorageError
    from storage.local_postgres import PostgresError

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


def study_stopped() -> type[Exception]:
    """A study that cannot go on (not bad input): one line, exit code 1; what it stored stays."""
    from search.study import StudyStopped

    return StudyStopped


def reported(prog: str, run: Callable[[], int], also: tuple[type[Exception], ...] = ()) -> int:
    """`run()` for a script beside the CLI (the benchmarks that take a scenario or a landscape):
    bad input (`user_errors`, and `also`) one line and exit code 2, a study that cannot go on one
    line and exit code 1, as `autotune` does."""
    try:
        return run()
    except (*user_errors(), *also) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except study_stopped() as e:
        print(f"{prog}: stopped: {e}", file=sys.stderr)
        return 1


def output_not_written() -> type[OutputNotWritten]:
    from search.disk import OutputNotWritten

    return OutputNotWritten


def not_written_line(args: argparse.Namespace, e: OutputNotWritten) -> str:
    """The file, why, the free space; after a study, that it is stored and the command that
    writes its outputs again (`autotune export` with this command's study, its flags as given)."""
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


def database_away(e: Exception) -> str | None:
    """What the database said, if `e` means it is away (outside the steps a study rides out: its
    start, the outputs at its end)."""
    from storage.connection import connection_lost

    return connection_lost(e)
