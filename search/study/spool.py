"""Trials measured while the database was away, kept on disk until it is back.

One JSON file per trial, RUN_DIR/spool/trial-NNNN.json: the trial's record, column by column
(its load stages too), and who wrote it. Written atomically (a temporary file in the same
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
from sqlalchemy.sql.elements import KeyedColumnElement

from storage.tables import StageRecord, TrialRecord

SPOOL_DIR = "spool"
# What the file keeps of a row: every column but those the database assigns when it is stored.
_TRIAL_COLUMNS = [c for c in TrialRecord.__table__.columns if c.key not in ("id", "study_id")]
_STAGE_COLUMNS = [c for c in StageRecord.__table__.columns if c.key not in ("id", "trial_id")]


@dataclass(frozen=True)
class Kept:
    path: Path
    study_name: str
    record: TrialRecord  # in no session: `queries.save_trial` stores it
    writer: dict[str, Any]  # the `WorkerId` that measured it, as a dict

    @property
    def trial_number(self) -> int:
        return self.record.trial_number


def spool_dir(run_dir: Path) -> Path:
    return run_dir / SPOOL_DIR


def keep(run_dir: Path, study_name: str, record: TrialRecord, writer: dict[str, Any]) -> Path:
    """The trial's record, on disk (atomically: a reader sees all of it or none)."""
    folder = spool_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"trial-{record.trial_number:04d}.json"
    text = json.dumps(
        {
            "study": study_name,
            "writer": writer,
            "record": _encoded(record, _TRIAL_COLUMNS),
            "stages": [_encoded(stage, _STAGE_COLUMNS) for stage in record.stages],
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
        record = TrialRecord(**_decoded(data["record"], _TRIAL_COLUMNS))
        record.stages = [StageRecord(**_decoded(stage, _STAGE_COLUMNS)) for stage in data["stages"]]
        found.append(Kept(path, data["study"], record, data["writer"]))
    return found


def drop(path: Path) -> None:
    path.unlink(missing_ok=True)  # another worker of this host may have stored it first


def _encoded(row: TrialRecord | StageRecord, columns: list[KeyedColumnElement[Any]]) -> dict[str, Any]:
    """The row's columns as JSON values: datetimes as ISO text."""
    values = {c.key: getattr(row, c.key) for c in columns}
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in values.items()}


def _decoded(stored: dict[str, Any], columns: list[KeyedColumnElement[Any]]) -> dict[str, Any]:
    """Back to what the columns hold: the datetimes were written as ISO text."""
    dates = {c.key for c in columns if isinstance(c.type, DateTime)}
    return {k: datetime.fromisoformat(v) if k in dates and v is not None else v for k, v in stored.items()}
