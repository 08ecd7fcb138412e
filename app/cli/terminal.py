"""What the commands print on: the console, and a study's end (the summary and the verdict on
it, and the study's files written)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import Console


def make_console() -> Console:
    """Rich's console; 160 columns when the output goes to a file or a pipe (rich would assume
    80 and fold the summary's parameter column into fragments)."""
    import sys

    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=160)


def finish_outputs(console: Console, storage_url: str, study_name: str, out_dir: Path) -> int:
    from app.outputs import finish

    finish(console, storage_url, study_name, out_dir)
    return 0
