"""A real PostgreSQL for tests: the project's own (`storage.local_postgres`), started in a
directory the `postgres` user can reach (under root the server runs as that user, and pytest's
temporary directories are private to root)."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psycopg
import pytest
from sqlalchemy.engine import make_url

from storage.local_postgres import LocalPostgres, PostgresError, bindir


def _have_postgres() -> bool:
    try:
        bindir()
        return True
    except PostgresError:
        return False


# pytestmark of every module that starts one
REQUIRES_POSTGRES = [pytest.mark.postgres, pytest.mark.skipif(
    not _have_postgres(), reason="no PostgreSQL server binaries (scripts/setup_postgres.sh)")]


@contextmanager
def reachable_dir() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def running_postgres() -> Iterator[tuple[LocalPostgres, str]]:
    """A started server and its URL; stopped and removed afterwards."""
    with reachable_dir() as base:
        server = LocalPostgres(base / "postgres")
        url = server.start()
        try:
            yield server, url
        finally:
            server.stop()


def fresh_database(server_url: str) -> str:
    """A new, empty database on the server at `server_url`: its URL."""
    parsed = make_url(server_url)
    name = f"t_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(host=parsed.host, port=parsed.port, user=parsed.username, password=parsed.password,
                         dbname=parsed.database, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return parsed.set(database=name).render_as_string(hide_password=False)
