"""`make db`'s PostgreSQL before any server tool runs: where its cluster goes, and the one line
that says why a directory the `postgres` user cannot reach will not do."""

from __future__ import annotations

from pathlib import Path

from storage.local_postgres import LocalPostgres


def test_the_cluster_directory_is_absolute_whatever_the_working_directory(tmp_path, monkeypatch):
    # The server's tools run from "/" (as the `postgres` user under root): a relative
    # runs/postgres would point there, not here.
    monkeypatch.chdir(tmp_path)
    assert LocalPostgres(Path("runs") / "postgres").root == tmp_path / "runs" / "postgres"
