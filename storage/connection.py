"""Whether an error says the database server is away (stopped, restarting, failing over, the
network between): what a study waits out, unlike an error in what it asked of the database.

SQLAlchemy wraps the driver's error (Optuna wraps SQLAlchemy's in `StorageInternalError`), so
the chain is searched. A server database is away when the connection was lost (SQLAlchemy's
own `connection_invalidated`) or could not be made: an `OperationalError` with no SQLSTATE (the
client's own, e.g. "Connection refused") or one of the connection classes. SQLite's errors are
never an outage: its OperationalError also means "no such table".
"""

from __future__ import annotations

import sqlite3

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

# PostgreSQL's SQLSTATEs for a server that is going or not there yet: class 08 (connection
# exception), admin_shutdown, crash_shutdown, cannot_connect_now ("the database system is
# starting up"); psycopg puts them in `sqlstate`.
CONNECTION_CLASS = "08"
SHUTDOWN_STATES = frozenset({"57P01", "57P02", "57P03"})


def connection_lost(exc: BaseException) -> str | None:
    """The database's words (first line) if `exc`, or an error it came from, says the connection
    to a database server is lost or refused; None for any other error."""
    seen: set[int] = set()
    err: BaseException | None = exc
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, DBAPIError) and not isinstance(err.orig, sqlite3.Error) and _away(err):
            words = str(err.orig if err.orig is not None else err).strip().splitlines()
            return words[0] if words else type(err.orig).__name__
        err = err.__cause__ or err.__context__
    return None


def _away(err: DBAPIError) -> bool:
    if err.connection_invalidated:
        return True
    if not isinstance(err, (OperationalError, InterfaceError)):
        return False
    state = getattr(err.orig, "sqlstate", None)
    return state is None or state.startswith(CONNECTION_CLASS) or state in SHUTDOWN_STATES
