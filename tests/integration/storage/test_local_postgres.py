"""`make db`'s PostgreSQL refuses a cluster directory the `postgres` user cannot reach, in one line, before
initdb (as root, with the `postgres` user scripts/setup_postgres.sh creates; it reserves the port).
"""

from __future__ import annotations

import os
import pwd

import pytest

from storage.local_postgres import SYSTEM_USER, LocalPostgres, PostgresError
from tests.support.postgres import reachable_dir


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
