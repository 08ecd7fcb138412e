"""Trials measured while the database was away, kept on disk until it is back.

One JSON file per trial, RUN_DIR/spool/trial-NNNN.json: the trial's record as `save_trial`
takes it (stages included) and who wrote it. Written atomically (a temporary file in the same
directory, flushed to disk, renamed over) before the recording first waits for the database,
removed once the record is committed. A run that finds one whose writer is gone (it gave up
waiting, or was killed) stores it before anything else.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import DateTime

from storage.tables import TrialRecord

SPOOL_DIR = "spool"


@dataclass(frozen=True)
class Kept:
    path: Path
    study_name: str
    trial_number: int
    fields: dict[str, Any]  # `queries.save_trial`'s keyword arguments
    writer: dict[str, Any]  # the `WorkerId` that measured it, as a dict


def spool_dir(run_dir: Path) -> Path:
    return run_dir / SPOOL_DIR


def keep(run_dir: Path, study_name: str, trial_number: int, fields: dict[str, Any], writer: dict[str, Any]) -> Path:
    """The trial's record, on disk (atomically: a reader sees all of it or none)."""
    folder = spool_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"trial-{trial_number:04d}.json"
    text = json.dumps(
        {
            "study": study_name,
            "trial_number": trial_number,
            "writer": writer,
            "fields": {k: _encoded(v) for k, v in fields.items()},
        },
        default=str,
    )
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def kept(run_dir: Path, study_name: str) -> list[Kept]:
    """The study's spooled trials, by trial number."""
    found = []
    for path in sorted(spool_dir(run_dir).glob("trial-*.json")):
        data = json.loads(path.read_text())
        if data["study"] != study_name:
            continue
        fields = {k: _decoded(k, v) for k, v in data["fields"].items()}
        found.append(Kept(path, data["study"], data["trial_number"], fields, data["writer"]))
    return found


def drop(path: Path) -> None:
    path.unlink(missing_ok=True)  # another worker of this host may have stored it first


def _encoded(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def _decoded(key: str, value: Any) -> Any:
    """Back to what the column holds: the record's datetimes were written as ISO text."""
    column = TrialRecord.__table__.columns.get(key)
    if value is not None and column is not None and isinstance(column.type, DateTime):
        return datetime.fromisoformat(value)
    return value
