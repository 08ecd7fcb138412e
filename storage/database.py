"""Opening the tuner's database: checking a storage URL before anything runs (a parsable URL, an
installed driver, a SQLite file in a writable directory, or a server that answers), creating the
tables and stamping them with this build, and refusing, in one line, tables another build made.
Nothing here reads or writes a study: that is `storage.queries`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, event, inspect
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import Session

from storage.tables import BUILD, FIRST_STAMPED_BUILD, SCHEMA_VERSION, Base, SchemaRecord, StudyRecord
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
