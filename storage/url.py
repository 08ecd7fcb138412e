"""What a storage URL says: whether it is a single-writer file (SQLite), how to show it, and how
a process this one starts reaches it without its password on a command line.

The one home of these facts: every place that must know "is this SQLite?" asks `single_writer`,
every place that shows a URL (terminal, logs, outputs, messages) shows `redacted(url)`, and every
child process given a URL (a worker) gets `for_child(url)`: the URL without its password, which
goes in the child's environment instead (libpq's PGPASSWORD), where `ps` does not show it.
"""

from __future__ import annotations

import re

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError


def single_writer(url: str) -> bool:
    """A database one process writes at a time (a SQLite file): one tuner per study there, and
    every write commits before Optuna writes."""
    try:
        return make_url(url).get_backend_name() == "sqlite"
    except ArgumentError:
        return str(url).startswith("sqlite")


# USER:PASSWORD@ after the scheme, in a text SQLAlchemy cannot parse (a bad port, say)
_CREDENTIALS = re.compile(r"(://[^:/@\s]*):[^@\s]*@")


def redacted(url: str) -> str:
    """`url` with its password shown as ***, also when SQLAlchemy cannot parse the rest of it, or
    when it is a `password=` parameter; a text without one is returned as it is."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        return _CREDENTIALS.sub(r"\1:***@", str(url))
    if parsed.password is None and PASSWORD_PARAM not in parsed.query:
        return str(url)
    if PASSWORD_PARAM in parsed.query:
        parsed = parsed.update_query_dict({PASSWORD_PARAM: "***"})
    return parsed.render_as_string(hide_password=True).replace("=%2A%2A%2A", "=***")


PASSWORD_PARAM = "password"  # libpq's connection parameter, which SQLAlchemy passes on from the query
PASSWORD_ENV = "PGPASSWORD"  # where libpq finds the password a connection was not given
_LIBPQ_DRIVERS = ("", "psycopg", "psycopg2", "psycopg2cffi")  # postgresql+DRIVER; "": psycopg2


class PasswordInArgv(ValueError):
    """A URL whose password a child process could only be given on its command line."""


def for_child(url: str) -> tuple[str, dict[str, str]]:
    """How a process started by this one reaches `url` with nothing secret on its command line:
    the URL to pass it (without a password) and what to add to its environment (the password, as
    PGPASSWORD, which libpq reads when the URL has none). A URL without a password (one that names
    a passfile, say) is passed as it is. PasswordInArgv for a password in the URL of a database
    that libpq does not reach (no other driver reads PGPASSWORD)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return url, {}  # refused by check_url before anything starts
    password = parsed.password if parsed.password is not None else parsed.query.get(PASSWORD_PARAM)
    if password is None:
        return url, {}
    backend, _, driver = parsed.drivername.partition("+")
    if backend != "postgresql" or driver not in _LIBPQ_DRIVERS:
        raise PasswordInArgv(
            f"--storage {redacted(url)}: its password would be on the workers' command lines, where "
            f"`ps` shows it; PostgreSQL (postgresql+psycopg://) takes it from their environment instead"
        )
    if isinstance(password, tuple):  # a parameter given twice: libpq takes the last
        password = password[-1]
    bare = parsed._replace(password=None).difference_update_query([PASSWORD_PARAM])  # set() keeps a None
    return bare.render_as_string(hide_password=False), {PASSWORD_ENV: str(password)}
