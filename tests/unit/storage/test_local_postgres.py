"""`make db`'s PostgreSQL before any server tool runs: where its cluster goes, and the one line
that says why a directory the `postgres` user cannot reach will not do."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from storage.local_postgres import SYSTEM_USER, LocalPostgres, PostgresError
from tests.support.postgres import reachable_dir


def test_the_cluster_directory_is_absolute_whatever_the_working_directory(tmp_path, monkeypatch):
    # The server's tools run from "/" (as the `postgres` user under root): a relative
    # runs/postgres would point there, not here.
    monkeypatch.chdir(tmp_path)
    assert LocalPostgres(Path("runs") / "postgres").root == tmp_path / "runs" / "postgres"


def test_a_cluster_the_postgres_user_cannot_reach_is_one_line_naming_the_closed_directory():
    if os.geteuid() != 0:
        pytest.skip("only root hands the cluster to another user")
    try:
        pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        pytest.skip(f"no {SYSTEM_USER!r} user here (scripts/setup_postgres.sh)")
    with reachable_dir() as base:
        closed = base / "home"
        closed.mkdir()
        os.chmod(closed, 0o700)  # as root's home is
        server = LocalPostgres(closed / "project" / "runs" / "postgres")
        with pytest.raises(PostgresError) as raised:
            server.start()  # before initdb, which would only say "Permission denied"
        assert str(raised.value) == (
            f"the 'postgres' user, who runs PostgreSQL for root, cannot enter {closed}, so cannot reach "
            f"{server.root}: run `autotune db start --runs-dir DIR` with a DIR it can reach, or open the way "
            f"(chmod o+x {closed})"
        )
        assert not server.initialized
