"""What a storage URL says: whether it is a single-writer file (SQLite) and how to show it.

The one home of both facts: every place that must know "is this SQLite?" asks `single_writer`,
and every place that shows a URL (terminal, logs, outputs, messages) shows `redacted(url)`.
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
    """`url` with its password shown as ***, also when SQLAlchemy cannot parse the rest of it; a
    text without one is returned as it is."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        return _CREDENTIALS.sub(r"\1:***@", str(url))
