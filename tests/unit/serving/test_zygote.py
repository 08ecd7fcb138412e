"""What a server inherits from the tuner's environment (no database password), and why a zygote
was replaced: names only, never values (serving.process.server, serving.process.zygote_pool).
"""

from pathlib import Path

from serving.process import server as server_mod
from serving.process import zygote, zygote_pool
from serving.process.server import LaunchSpec, VllmServer


def test_variables_the_tuners_libraries_set_for_themselves_do_not_reach_the_server(monkeypatch, tmp_path):
    """scikit-learn sets KMP_* when Optuna's importances import it, after a study's first trial;
    passed on, they changed the servers' environment mid-study (a second zygote, 10 s more)."""
    server = VllmServer(LaunchSpec(model=None, args=[], log_path=tmp_path / "s.log"))
    monkeypatch.setattr(server_mod, "_NOT_THE_USERS", server_mod.TUNER_LIBRARY_ENV)
    monkeypatch.setenv("KMP_DUPLICATE_LIB_OK", "True")
    assert "KMP_DUPLICATE_LIB_OK" not in server._env()
    monkeypatch.setattr(server_mod, "_NOT_THE_USERS", frozenset({"KMP_INIT_AT_FORK"}))  # the user set the other
    assert server._env()["KMP_DUPLICATE_LIB_OK"] == "True"


def test_the_database_password_a_worker_was_given_does_not_reach_its_servers(monkeypatch, tmp_path):
    server = VllmServer(LaunchSpec(model=None, args=[], log_path=tmp_path / "s.log"))
    monkeypatch.setenv("PGPASSWORD", "s3cret")
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "passfile"))
    monkeypatch.setenv("PGHOST", "db.internal")  # not a secret: left as the user set it
    env = server._env()
    assert "PGPASSWORD" not in env and "PGPASSFILE" not in env and "s3cret" not in env.values()
    assert env["PGHOST"] == "db.internal"


def test_a_replaced_zygote_is_explained_by_names_never_values(tmp_path):
    old = zygote.Zygote.__new__(zygote.Zygote)
    old.key, old.gone = zygote.zygote_key("py", {"A": "1", "TOKEN": "secret-1"}), False
    why = zygote_pool._replaced_because(old, zygote.zygote_key("py", {"A": "1", "TOKEN": "secret-2", "B": "x"}))
    assert why == "the environment differs from the last one's in B, TOKEN" and "secret" not in why


class FakeZygote:
    """A zygote that starts no process: it records where it would log and forks nothing."""

    def __init__(self, python, env, api_module, log_path, mode):
        self.key, self.log_path, self.gone, self.forks = zygote.zygote_key(python, env, mode), log_path, False, 0

    def fork(self, *args):
        self.forks += 1
        return zygote.ForkedServer(self, pid=1)

    def close(self):
        self.gone = True


def test_the_zygote_logs_beside_the_server_that_started_it_never_above_its_directory(monkeypatch):
    monkeypatch.setattr(zygote_pool, "start_zygote", FakeZygote)
    monkeypatch.setattr(zygote_pool, "_current", None)
    # A real-server test's log sits in test-artifacts/ of the working directory: the zygote's
    # log went one level up, into the working directory (the repository's root).
    forked = zygote_pool.fork_server(
        zygote_pool.ServerFork("py", {}, "api", [], Path("test-artifacts/real-server.log"), 0, 0, "t"), 1.0
    )
    assert forked.zygote.log_path == Path("test-artifacts/zygote.log")
    # A study: the calibration's server starts it, every trial's server reuses it.
    monkeypatch.setattr(zygote_pool, "_current", None)
    run_dir = Path("/runs/study")
    first = zygote_pool.fork_server(
        zygote_pool.ServerFork("py", {}, "api", [], run_dir / "calibration" / "server.log", 0, 0, "t"), 1.0
    )
    again = zygote_pool.fork_server(
        zygote_pool.ServerFork("py", {}, "api", [], run_dir / "trial-0001" / "server.log", 0, 0, "t"), 1.0
    )
    assert first.zygote is again.zygote and again.zygote.log_path == run_dir / "calibration" / "zygote.log"
