"""Which errors say the database server is away (what a study waits out), and which do not."""

import sqlite3

import optuna
import psycopg
import psycopg.errors
from sqlalchemy.exc import DBAPIError, OperationalError, ProgrammingError

from storage.connection import connection_lost

REFUSED = 'connection failed: connection to server at "127.0.0.1", port 5432 failed: Connection refused'


def _wrapped(orig: Exception, kind=OperationalError) -> DBAPIError:
    return kind("SELECT 1", {}, orig)


def test_a_refused_or_dropped_connection_is_the_database_away():
    assert connection_lost(_wrapped(psycopg.OperationalError(REFUSED + "\n\tIs the server running?"))) == REFUSED
    shutdown = _wrapped(psycopg.errors.AdminShutdown("terminating connection due to administrator command"))
    assert connection_lost(shutdown) == "terminating connection due to administrator command"
    starting = _wrapped(psycopg.errors.CannotConnectNow("the database system is starting up"))
    assert connection_lost(starting) == "the database system is starting up"


def test_optunas_wrapping_is_seen_through():
    try:
        try:
            raise _wrapped(psycopg.OperationalError(REFUSED))
        except OperationalError as e:
            raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from e
    except optuna.exceptions.StorageInternalError as e:
        assert connection_lost(e) == REFUSED


def test_an_error_in_what_was_asked_is_not_an_outage():
    assert connection_lost(_wrapped(psycopg.errors.DeadlockDetected("deadlock detected"))) is None
    assert connection_lost(_wrapped(psycopg.errors.UndefinedTable("no such relation"), ProgrammingError)) is None
    assert connection_lost(_wrapped(sqlite3.OperationalError("no such table: trials"))) is None
    assert connection_lost(ValueError("connection refused")) is None
