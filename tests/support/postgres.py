"""A real PostgreSQL for tests: the project's own (`storage.local_postgres`), started in a
directory the `postgres` user can reach (under root the server runs as that user, and pytest's
temporary directories are private to root)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from storage.local_postgres import LocalPostgres, PostgresError, bindir
from tests.support.paths import REPO


def _have_postgres() -> bool:
    try:
        bindir()
        return True
    except PostgresError:
        return False


# pytestmark of every module that starts one
REQUIRES_POSTGRES = [
    pytest.mark.postgres,
    pytest.mark.skipif(not _have_postgres(), reason="no PostgreSQL server binaries (scripts/setup_postgres.sh)"),
]


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


def connect(url: str, **kw) -> psycopg.Connection:
    """psycopg on a SQLAlchemy URL, as SQLAlchemy's psycopg dialect connects (its query, the
    passfile of `make db`'s URL, as connection parameters)."""
    parsed = make_url(url)
    params: dict[str, Any] = {**parsed.translate_connect_args(username="user", database="dbname"), **parsed.query}
    return psycopg.connect(**params, **kw)


def fresh_database(server_url: str) -> str:
    """A new, empty database on the server at `server_url`: its URL (as `make db` gives it, no
    password in it: the server's passfile names every database)."""
    parsed = make_url(server_url)
    name = f"t_{uuid.uuid4().hex[:10]}"
    with connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return parsed.set(database=name).render_as_string(hide_password=False)


def with_password(url: str) -> str:
    """`url` (of `make db`'s server) with its password in it, as a user might give one: read from
    the passfile the URL names."""
    parsed = make_url(url)
    password = Path(str(parsed.query["passfile"])).read_text().strip().rsplit(":", 1)[1]
    return parsed.difference_update_query(["passfile"]).set(password=password).render_as_string(hide_password=False)


def fresh_clone(dest: Path) -> Path:
    """`git clone` of this repository at `dest`, with the uncommitted changes applied, and this
    test run's virtualenv linked in as its .venv; skips unless `make setup` would leave that
    venv alone (its stamp, as scripts/setup.sh names it, is there), since a setup run from
    the clone would reinstall the project into it from the clone."""
    venv = Path(sys.prefix)
    extra = os.environ.get("VLLM_EXTRA", "auto")
    if extra == "auto":
        gpu = shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0
        extra = "gpu" if gpu else "cpu"
    digest = hashlib.sha256((REPO / "pyproject.toml").read_bytes() + (REPO / "scripts" / "setup.sh").read_bytes())
    if not (venv / f".setup-{extra}-{digest.hexdigest()[:16]}").exists():
        pytest.skip(f"{venv} is not set up by scripts/setup.sh (make setup) for this pyproject.toml")
    subprocess.run(["git", "clone", "-q", str(REPO), str(dest)], check=True)
    work = subprocess.run(["git", "-C", str(REPO), "diff", "HEAD", "--binary"], capture_output=True, check=True).stdout
    if work:
        subprocess.run(["git", "-C", str(dest), "apply", "--binary", "-"], input=work, check=True)
    (dest / ".venv").symlink_to(venv)
    return dest
