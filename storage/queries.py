"""Opening the database and the few queries the study, export and report need.

What one worker of a study does for all of them is claimed through the study's row: `claimed`
locks the study's `autotune_studies` row for the block (SELECT ... FOR UPDATE): on PostgreSQL a
second worker waits there until the first commits, and a worker that dies holding the lock
releases it with its connection, so the next one finds the work undone and does it. SQLite has
no row locks (and takes one worker per study): there the block runs unlocked.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, inspect, select
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import Session, selectinload

from storage.tables import (
    BUILD,
    FIRST_STAMPED_BUILD,
    SCHEMA_VERSION,
    Base,
    ConfirmationRun,
    ParetoMember,
    ParetoSnapshot,
    SchemaRecord,
    StudyRecord,
    TrialRecord,
)
from storage.url import redacted, single_writer

SQLITE_TIMEOUT_S = 30  # the dashboard reads while the study writes
SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file
CONNECT_TIMEOUT_S = 10  # a database server that does not answer: how long a connection attempt waits


def engine_kwargs(url: str) -> dict:
    """How an engine on `url` connects: SQLite waits for the dashboard's reads; a server database
    gets each pooled connection tested before use (after a restart the pool holds dead ones) and
    a bound on a connection attempt (an unreachable host would otherwise hang it)."""
    if single_writer(url):
        return {"connect_args": {"timeout": SQLITE_TIMEOUT_S}}
    return {"pool_pre_ping": True, "connect_args": {"connect_timeout": CONNECT_TIMEOUT_S}}


class StorageError(ValueError):
    """Storage that cannot hold a study; the message names the URL or path and what to do."""


def check_writable_dir(path: Path, what: str) -> None:
    """Raise StorageError unless `path` is a directory this process can write in, or can create.
    Creates nothing: a temporary file in the nearest existing directory is the only test that
    holds for root, read-only file systems and ACLs alike."""
    path = Path(path).expanduser().absolute()
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise StorageError(
            f"{what} {path} cannot be created: {existing} is not a directory; choose a directory you can write to"
        )
    try:
        tempfile.TemporaryFile(dir=existing).close()
    except OSError as e:
        where = "is read-only" if existing == path else f"cannot be created in {existing}"
        raise StorageError(f"{what} {path} {where} ({e.strerror}); choose a directory you can write to") from None


def check_url(url: str) -> None:
    """Raise StorageError unless a study can be stored at `url`: a URL SQLAlchemy parses, its
    driver installed, and a SQLite file that is a database (or absent) in a writable directory,
    or a database server that answers. Creates nothing."""
    if not url.strip():  # more likely an unset variable (STORAGE=$URL) than a wish for the default
        raise StorageError(
            "--storage is empty (an unset variable?); pass a database URL: the one `make db` "
            "prints, or sqlite:///PATH/autotune.db"
        )
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        raise StorageError(
            f"--storage {redacted(url)!r} is not a database URL; use sqlite:///PATH/autotune.db or "
            f"DIALECT+DRIVER://USER:PASSWORD@HOST/DATABASE"
        ) from None
    shown = redacted(url)
    sqlite = single_writer(url)
    connect_args = {} if sqlite else {"connect_timeout": CONNECT_TIMEOUT_S}
    try:
        engine = create_engine(parsed, connect_args=connect_args)  # loads the dialect, imports the driver
    except NoSuchModuleError:
        raise StorageError(
            f"--storage {shown}: SQLAlchemy has no database kind {parsed.drivername!r}; "
            f"use sqlite:///PATH or e.g. postgresql+psycopg://..."
        ) from None
    except ImportError as e:
        raise StorageError(
            f"--storage {shown}: its driver {e.name or parsed.drivername!r} is not installed; "
            f"install it (.venv/bin/pip install {e.name}) or use sqlite:///PATH"
        ) from None
    try:
        if sqlite:
            _check_sqlite(shown, parsed)
            return
        try:
            with engine.connect():
                pass
        except SQLAlchemyError as e:
            reason = str(getattr(e, "orig", None) or e).strip().splitlines()[0]
            raise StorageError(
                f"--storage {shown}: the database does not answer ({reason}); start it, or "
                f"check the host, port and credentials"
            ) from None
    finally:
        engine.dispose()


def _check_sqlite(shown: str, parsed: URL) -> None:
    if parsed.database in (None, "", ":memory:"):
        return
    path = Path(parsed.database).expanduser()
    if path.is_dir():
        raise StorageError(
            f"--storage {shown}: {path} is a directory; name a file, e.g. sqlite:///{path.absolute() / 'autotune.db'}"
        )
    if path.exists():
        try:
            with open(path, "r+b") as f:  # read and write, as the study will
                header = f.read(len(SQLITE_HEADER))
        except OSError as e:
            raise StorageError(
                f"--storage {shown}: cannot open {path} for writing ({e.strerror}); "
                f"make it writable or name another file"
            ) from None
        if header and header != SQLITE_HEADER:  # an empty file is a new database to SQLite
            raise StorageError(
                f"--storage {shown}: {path} is not a SQLite database; name another file "
                f"(it is created) or move this one away"
            )
    # SQLite writes its journal beside the file, so the directory must be writable too.
    check_writable_dir(path.parent, f"--storage {shown}: the directory")


def open_db(url: str) -> Engine:
    """An engine on `url` with our tables created (Optuna creates its own), the database stamped
    with this build; raises StorageError for a database another build made (`check_schema`)."""
    parsed = make_url(url)
    if single_writer(url) and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, **engine_kwargs(url))
    if single_writer(url):

        @event.listens_for(engine, "connect")
        def _fk_on(dbapi_conn, _):  # pragma: no cover - trivial
            dbapi_conn.execute("PRAGMA foreign_keys=ON")

    try:
        check_schema(engine, url)
        Base.metadata.create_all(engine)
        _stamp(engine)
    except BaseException:
        engine.dispose()
        raise
    return engine


def check_schema(engine: Engine, url: str) -> None:
    """Raise StorageError, in one line naming the build that made it, unless the tuner's tables
    at `engine` are this build's (or there are none yet). Tables of another shape are never
    read or migrated: a study is resumed, exported and reported by the build that began it."""
    existing = inspect(engine)
    if not existing.has_table(StudyRecord.__tablename__):
        return
    made_by = f"a vllm-autotune build before {FIRST_STAMPED_BUILD}"
    if existing.has_table(SchemaRecord.__tablename__):
        with Session(engine) as session:
            stamp = session.get(SchemaRecord, 1)
        if stamp is None or stamp.schema_version == SCHEMA_VERSION:
            return  # unstamped: this build created the tables and was stopped before the stamp
        made_by = f"vllm-autotune {stamp.build} (schema {stamp.schema_version})"
    raise StorageError(
        f"--storage {redacted(url)}: the database was made by {made_by}, and this build "
        f"({BUILD}, schema {SCHEMA_VERSION}) does not read it; use that build for it, or another --storage"
    )


def _stamp(engine: Engine) -> None:
    """This build's stamp, unless the database has one (another worker may write it first)."""
    with Session(engine) as session:
        if session.get(SchemaRecord, 1) is not None:
            return
        session.add(SchemaRecord(id=1, schema_version=SCHEMA_VERSION, build=BUILD))
        try:
            session.commit()
        except IntegrityError:
            session.rollback()


@contextmanager
def existing_engine(url: str) -> Iterator[Engine | None]:
    """An engine on the tuner's database at `url`, None if there is none (no SQLite file, or no
    tuner tables); unlike `open_db` it creates nothing, so a reader given a wrong URL leaves no
    empty database behind. Raises StorageError for a database another build made."""
    if single_writer(url) and not Path(make_url(url).database or "").expanduser().exists():
        yield None
        return
    engine = create_engine(url, **engine_kwargs(url))
    try:
        check_schema(engine, url)
        yield engine if inspect(engine).has_table(StudyRecord.__tablename__) else None
    finally:
        engine.dispose()


def existing_database_check(url: str, hint: str) -> None:
    """Raise LookupError (with `hint`) unless the tuner's database is at `url`; creates nothing."""
    with existing_engine(url) as engine:
        if engine is None:
            raise LookupError(f"no study database at {redacted(url)}; {hint}")


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
