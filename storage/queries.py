"""The few queries the study, export and report need (opening the database is `storage.database`).

What one worker of a study does for all of them is claimed through the study's row: `claimed`
locks the study's `autotune_studies` row for the block (SELECT ... FOR UPDATE): on PostgreSQL a
second worker waits there until the first commits, and a worker that dies holding the lock
releases it with its connection, so the next one finds the work undone and does it. SQLite has
no row locks (and takes one worker per study): there the block runs unlocked.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, selectinload

from storage.database import existing_engine
from storage.tables import (
    Base,
    ConfirmationRun,
    ParetoMember,
    ParetoSnapshot,
    StudyRecord,
    TrialRecord,
)
from storage.url import redacted


def existing_study_check(url: str, study_name: str, hint: str) -> None:
    """Raise LookupError (with `hint`) unless `study_name` is stored at `url`; creates nothing."""
    with existing_engine(url) as engine:
        if engine is not None:
            with Session(engine) as session:
                if find_study(session, study_name) is not None:
                    return
    raise LookupError(f"no study named {study_name!r} in {redacted(url)}; {hint}")


def find_study(session: Session, study_name: str) -> StudyRecord | None:
    return session.scalar(select(StudyRecord).where(StudyRecord.study_name == study_name))


def require_study(session: Session, study_name: str) -> StudyRecord:
    study = find_study(session, study_name)
    if study is None:
        names = session.scalars(select(StudyRecord.study_name)).all()
        raise LookupError(
            f"no study named {study_name!r} in this database; studies here: {', '.join(names) or '(none)'}"
        )
    return study


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


def _replacing(session: Session, stored: Base | None, row: Base) -> None:
    """`row` (a new row, in no session) in the place of `stored` (None: there was none)."""
    if stored is not None:
        session.delete(stored)
        session.flush()
    session.add(row)
    session.flush()


def save_trial(session: Session, study: StudyRecord, record: TrialRecord) -> TrialRecord:
    """Store `record` (a new row, in no session) as trial `record.trial_number` of `study`, with
    its load stages; a trial stored already (run again after an interruption) is replaced."""
    record.study_id = study.id
    stored = session.scalar(
        select(TrialRecord).where(TrialRecord.study_id == study.id, TrialRecord.trial_number == record.trial_number)
    )
    _replacing(session, stored, record)
    return record


# What a repeat of an earlier trial's flags takes from it: the measurement and how it ended.
REUSED_COLUMNS = tuple(
    c.key
    for c in (
        TrialRecord.metrics,
        TrialRecord.server_diagnostics,
        TrialRecord.values,
        TrialRecord.constraints,
        TrialRecord.feasible,
        TrialRecord.client_behind,
        TrialRecord.log_path,
        TrialRecord.command,
        TrialRecord.capacity,
        TrialRecord.failure_class,
        TrialRecord.failure_phase,
        TrialRecord.failure_line,
    )
)


def save_duplicate(session: Session, study: StudyRecord, record: TrialRecord, earlier: TrialRecord) -> TrialRecord:
    """Store `record`, a trial whose flags `earlier` ran, with `earlier`'s measurement and
    failure (`REUSED_COLUMNS`) and no stages of its own (it started nothing)."""
    for key in REUSED_COLUMNS:
        setattr(record, key, getattr(earlier, key))
    record.stages = []
    return save_trial(session, study, record)


def earlier_run_of(session: Session, study: StudyRecord, fingerprint: str) -> TrialRecord | None:
    """The first trial with the same effective server configuration that may stand for a repeat
    of it (`TrialRecord.reusable`)."""
    same = session.scalars(
        select(TrialRecord)
        .where(TrialRecord.study_id == study.id, TrialRecord.fingerprint == fingerprint)
        .order_by(TrialRecord.trial_number)
    )
    return next((row for row in same if row.reusable), None)


def server_starts(session: Session, study: StudyRecord) -> int:
    """How much of the study's budget its trials have spent (`TrialRecord.counts_against_budget`)."""
    return sum(row.counts_against_budget for row in trial_records(session, study))


def trial_seconds(session: Session, study: StudyRecord) -> tuple[float, ...]:
    """How long each trial that cost a server start took, start to record, in trial order."""
    rows = trial_records(session, study)
    return tuple((r.finished_at - r.started_at).total_seconds() for r in rows if r.counts_against_budget)


def trial_records(session: Session, study: StudyRecord) -> list[TrialRecord]:
    return list(
        session.scalars(select(TrialRecord).where(TrialRecord.study_id == study.id).order_by(TrialRecord.trial_number))
    )


def clients_behind(session: Session, study: StudyRecord) -> set[int]:
    """The trials whose load client fell behind its schedule (`TrialRecord.client_behind`)."""
    return set(
        session.scalars(
            select(TrialRecord.trial_number).where(
                TrialRecord.study_id == study.id, TrialRecord.client_behind.is_(True)
            )
        )
    )


def save_confirmation_run(session: Session, study: StudyRecord, run: ConfirmationRun) -> ConfirmationRun:
    """Store `run` (a new row, in no session); a run redone after an interruption replaces the stored one."""
    run.study_id = study.id
    stored = session.scalar(
        select(ConfirmationRun).where(
            ConfirmationRun.study_id == study.id,
            ConfirmationRun.trial_number == run.trial_number,
            ConfirmationRun.round == run.round,
        )
    )
    _replacing(session, stored, run)
    return run


def confirmation_runs(session: Session, study: StudyRecord) -> list[ConfirmationRun]:
    return list(
        session.scalars(
            select(ConfirmationRun)
            .where(ConfirmationRun.study_id == study.id)
            .order_by(ConfirmationRun.sequence, ConfirmationRun.round)
        )
    )


def save_snapshot(
    session: Session,
    study: StudyRecord,
    after_trial_number: int,
    members: Iterable[ParetoMember],
    hypervolume: float | None,
    n_finished: int,
    n_feasible: int,
) -> ParetoSnapshot:
    old = session.scalar(
        select(ParetoSnapshot).where(
            ParetoSnapshot.study_id == study.id, ParetoSnapshot.after_trial_number == after_trial_number
        )
    )
    if old is not None:
        session.delete(old)
        session.flush()
    snap = ParetoSnapshot(
        study_id=study.id,
        after_trial_number=after_trial_number,
        n_finished=n_finished,
        n_feasible=n_feasible,
        hypervolume=hypervolume,
    )
    snap.members = list(members)
    session.add(snap)
    session.flush()
    return snap


def front_history(session: Session, study: StudyRecord) -> list[ParetoSnapshot]:
    return list(
        session.scalars(
            select(ParetoSnapshot)
            .where(ParetoSnapshot.study_id == study.id)
            .options(selectinload(ParetoSnapshot.members))
            .order_by(ParetoSnapshot.after_trial_number)
        )
    )
