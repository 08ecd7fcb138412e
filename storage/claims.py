"""What one worker of a study does for all of them, claimed through the study's row.

`claimed` locks the study's `autotune_studies` row for the block (SELECT ... FOR UPDATE): on
PostgreSQL a second worker waits there until the first commits, and a worker that dies holding
the lock releases it with its connection, so the next one finds the work undone and does it.
SQLite has no row locks (and takes one worker per study): there the block runs unlocked.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from storage.tables import StudyRecord


@contextmanager
def claimed(engine: Engine, study_id: int) -> Iterator[tuple[Session, StudyRecord]]:
    """The study's row, locked and freshly read, in a session of its own; committed at the end
    of the block (rolled back, and the lock released, if it raises)."""
    with Session(engine, expire_on_commit=False) as session:
        rec = session.scalar(select(StudyRecord).where(StudyRecord.id == study_id).with_for_update())
        if rec is None:
            raise LookupError(f"no study with id {study_id} in this database")
        yield session, rec
        session.commit()


def set_once(engine: Engine, study_id: int, field: str, value: Any) -> Any:
    """`field` of the study set to `value` unless a worker set it first; returns what is stored."""
    with claimed(engine, study_id) as (_, rec):
        if getattr(rec, field) is None:
            setattr(rec, field, value)
        return getattr(rec, field)
