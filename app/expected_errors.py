"""The errors a command expects, and how one ends on them: bad input is one line on stderr and exit
code 2, a study that cannot go on one line and exit code 1, never a traceback. `autotune`
(app.cli) and the benchmark scripts (`reported`) share them."""

from __future__ import annotations

import sys
from collections.abc import Callable


def user_errors() -> tuple[type[Exception], ...]:
    """Errors that mean bad input: printed as one clear message, exit code 2, no traceback (here
    and in the benchmark scripts that take a scenario)."""
    from app.workers import SlotError
    from search.scenario import ScenarioError
    from search.space import SpaceError
    from search.study import StudyBusy, StudyMismatch
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
