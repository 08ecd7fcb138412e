"""The disk under the runs directory: files the user reads, written whole or not at all, and
the free space a study needs to go on.

`write_atomic` writes a temporary file beside the target, syncs it and renames it over the
target, so a write that fails (disk full, permission) leaves the previous file as it was and no
temporary file behind; it raises `OutputNotWritten` (the file, the reason, the free space).
`room` compares the free space with what the study has left to do, from the footprint measured
below.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

KiB, MiB, GiB = 1024, 1024**2, 1024**3
# Where logs, exports and the default database go, relative to the working directory.
DEFAULT_RUNS_DIR = Path("runs")

# What a study writes: per server start its log and its database rows; report.html is mostly
# the plotly.js it inlines. Sizes measured on a `mixed` study (docs/results.md, "Disk use"),
# rounded up: a longer workload logs more requests.
SERVER_START_BYTES = 256 * KiB  # a trial or a confirmation run: its server log and its rows
OUTPUTS_BYTES = 5 * MiB  # best.yaml, pareto.yaml and report.html of a study with no trial yet
OUTPUT_BYTES_PER_START = 32 * KiB  # what each server start adds to them (the report's tables and figures)


def human(n: float) -> str:
    """A byte count as people read it: 652 KiB, 4.7 MiB."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return f"{n / size:.1f} {unit}" if n < 10 * size else f"{n / size:.0f} {unit}"
    return f"{n:.0f} B"


def _existing(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists (what a directory not created yet lives on)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(directory: Path) -> int:
    """Free space, for an unprivileged writer, on the filesystem that holds `directory`."""
    return shutil.disk_usage(_existing(Path(directory))).free


class OutputNotWritten(Exception):
    """A file for the user that could not be written; the previous one, if any, is unchanged."""

    def __init__(self, path: Path, error: OSError):
        self.path, self.error = Path(path), error
        self.reason = error.strerror or str(error)
        try:
            self.free: int | None = free_bytes(self.path.parent)
        except OSError:
            self.free = None
        super().__init__(str(self))

    @property
    def disk_full(self) -> bool:
        return self.error.errno in (errno.ENOSPC, errno.EDQUOT)

    def __str__(self) -> str:
        free = f"{human(self.free)} free" if self.free is not None else "free space unknown"
        return f"{self.path}: {self.reason} ({free} in {self.path.parent})"


def write_atomic(path: Path | str, text: str) -> Path:
    """Write `text` (UTF-8) to `path` whole or not at all: a temporary file in the same
    directory, fsync, then `os.replace` over `path`. Raises OutputNotWritten; then `path` is as
    it was and the temporary file is gone. (atomicwrites, the library for this, is archived.)"""
    path = Path(path)
    data = text.encode("utf-8")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for open()
    except OSError as e:
        raise OutputNotWritten(path, e) from e
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise OutputNotWritten(path, e) from e
    _sync_directory(path.parent)
    return path


def _sync_directory(directory: Path) -> None:
    """The rename itself on disk too (a crash right after it keeps the new file)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot sync a directory; the file itself is synced
    finally:
        os.close(fd)


def outputs_bytes(starts: int) -> int:
    """best.yaml, pareto.yaml and report.html of a study with `starts` server starts."""
    return OUTPUTS_BYTES + starts * OUTPUT_BYTES_PER_START


@dataclass(frozen=True)
class Room:
    """The free space in a study's runs directory against what the study has left to do."""

    directory: Path
    free: int
    done: int  # server starts the study has stored
    left: int  # server starts still to come (trials and confirmation runs)

    @property
    def next_start(self) -> int:
        """One more server start, then the outputs rewritten beside the old ones."""
        return SERVER_START_BYTES + outputs_bytes(self.done + 1)

    @property
    def rest(self) -> int:
        """Every start left, then the outputs."""
        return self.left * SERVER_START_BYTES + outputs_bytes(self.done + self.left)

    @property
    def full(self) -> bool:
        """Too little for one more start and the outputs after it."""
        return self.left > 0 and self.free < self.next_start

    @property
    def short(self) -> bool:
        """Enough for the next start, not for all that is left."""
        return self.left > 0 and not self.full and self.free < self.rest

    def holds(self) -> int:
        """How many more starts fit before the outputs no longer do."""
        per = SERVER_START_BYTES + OUTPUT_BYTES_PER_START
        return max(0, (self.free - outputs_bytes(self.done)) // per)

    def full_line(self) -> str:
        return (
            f"{human(self.free)} free in {self.directory}, less than one more trial needs (about "
            f"{human(self.next_start)}: its server log and rows, {human(SERVER_START_BYTES)}, and the outputs "
            f"written after it, {human(outputs_bytes(self.done + 1))})"
        )

    def short_line(self) -> str:
        return (
            f"{human(self.free)} free in {self.directory} holds about {self.holds()} of the {self.left} "
            f"server starts left (trials and confirmation runs, {human(SERVER_START_BYTES)} each) and the "
            f"outputs ({human(outputs_bytes(self.done + self.left))}); the study stops before a trial it has "
            f"no room for"
        )


def room(directory: Path, *, done: int, left: int) -> Room:
    return Room(Path(directory), free_bytes(directory), done, left)
