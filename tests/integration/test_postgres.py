"""The project's own PostgreSQL (`make db`): a real server, started and stopped here, holding a
real study loop's trials, snapshots and Optuna's tables; `make db` and `make db-stop` run as the
README gives them, from a fresh clone, and print no password (the URL names a passfile); a study
on it given a URL with a password shows that password nowhere."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import optuna
import psutil
import psycopg
import pytest
from sqlalchemy import MetaData, create_engine, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from storage import database, queries
from storage.local_postgres import LocalPostgres
from tests.support.cli import autotune_forked
from tests.support.paths import REPO
from tests.support.postgres import REQUIRES_POSTGRES, connect, fresh_clone, reachable_dir, with_password
from tests.support.scripted_executor import ScriptedExecutor
from tests.support.study_loop import LOOP_SCENARIO, optuna_trials, rows, runner

pytestmark = REQUIRES_POSTGRES


def _postmasters(data: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if cmd and cmd[0].endswith("postgres") and str(data) in cmd:
            found.append(p)
    return found


def test_db_start_serves_a_password_protected_database_on_loopback_only(postgres_server):
    server, url = postgres_server
    parsed = make_url(url)
    assert parsed.drivername == "postgresql+psycopg" and parsed.host == "127.0.0.1"
    assert parsed.password is None and parsed.query == {"passfile": str(server.passfile)}
    for secret in (server.root / "password", server.passfile):
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert server.start() == url  # idempotent: the running server, the same URL
    with connect(url) as conn:  # the password from the passfile the URL names, as libpq reads it
        assert conn.execute("SHOW listen_addresses").fetchone()[0] == "127.0.0.1"
    engine = create_engine(url)  # and through SQLAlchemy, as every command connects
    with engine.connect() as conn:
        assert conn.execute(text("SELECT current_user")).scalar() == "autotune"
    engine.dispose()
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        connect(url, password="wrong")
    with pytest.raises(psycopg.OperationalError, match=r"no password supplied|password authentication failed"):
        connect(make_url(url).difference_update_query(["passfile"]).render_as_string(), passfile="/nonexistent")


def test_a_study_on_postgres_keeps_every_trial_and_snapshot_and_resumes(tmp_path, postgres_url):
    url = postgres_url
    runner(tmp_path, ScriptedExecutor(), trials=2, storage=url).run()
    again = ScriptedExecutor()
    r = runner(tmp_path, again, trials=4, storage=url)
    r.run()  # a resume: two more server starts, none repeated
    assert len(again.plans) == 2
    stored = rows(r)  # a repeat of earlier flags is stored too, and costs no start
    numbers = [t.trial_number for t in stored]
    assert numbers == list(range(len(numbers))) and sum(t.status != "duplicate" for t in stored) == 4
    assert {t.state for t in optuna_trials(r)} == {optuna.trial.TrialState.COMPLETE}
    with Session(database.open_db(url)) as session:
        history = queries.front_history(session, queries.require_study(session, "loop"))
        assert [s.after_trial_number for s in history] == numbers  # one snapshot per finished trial


def test_db_stop_leaves_no_server_and_the_cli_prints_one_line():
    with reachable_dir() as base:
        _start_and_stop_through_the_cli(base)


def _start_and_stop_through_the_cli(base: Path) -> None:
    missing = autotune_forked("db", "url", "--runs-dir", base, timeout=60)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert (
        missing.stderr.strip()
        == f"autotune: error: no database in {base / 'postgres'}: run `make db` (autotune db start) first"
    )
    # It starts a server: a fresh interpreter, as `make db` runs it.
    started = subprocess.run(
        [sys.executable, "-m", "app.cli", "db", "start", "--runs-dir", str(base)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith(
        f"postgresql+psycopg://autotune@127.0.0.1:{LocalPostgres(base / 'postgres').port}/"
    )
    assert _postmasters(base / "postgres" / "data")
    stopped = autotune_forked("db", "stop", "--runs-dir", base, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert _postmasters(base / "postgres" / "data") == []


def test_make_db_and_db_stop_work_as_the_readme_gives_them_from_a_fresh_clone():
    # From the clone's root with the default, relative runs/: the server's tools run as another
    # user from "/" under root, where a relative path would point nowhere.
    with reachable_dir() as base:
        clone = fresh_clone(base / "clone")
        data = clone / "runs" / "postgres" / "data"
        # The clone's code, not the one the venv was installed from; and make as a user runs it from
        # a shell: under `make test`, MAKELEVEL would have the inner make print "Entering directory".
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))},
            "PYTHONPATH": str(clone),
        }

        def make(target: str) -> subprocess.CompletedProcess:
            return subprocess.run(["make", target], cwd=clone, env=env, capture_output=True, text=True, timeout=300)

        try:
            started = make("db")
            assert started.returncode == 0, started.stderr
            url = started.stdout.strip()  # the one line printed: the URL to pass as STORAGE=
            password = (clone / "runs" / "postgres" / "password").read_text().strip()
            assert password not in started.stdout + started.stderr
            assert make_url(url).password is None
            with connect(url, connect_timeout=5) as conn:  # the URL alone reaches it: libpq reads the passfile
                assert conn.execute("SELECT current_database()").fetchone() == ("autotune",)
            assert _postmasters(data)
            again = make("db")
            assert again.stdout.strip() == url  # again: the running server, the same URL
            assert password not in again.stdout + again.stderr
            stopped = make("db-stop")
            assert stopped.returncode == 0, stopped.stderr
            assert _postmasters(data) == []
            with pytest.raises(psycopg.OperationalError):
                connect(url, connect_timeout=5)
        finally:
            LocalPostgres(clone / "runs" / "postgres").stop()  # a failed test leaves no server behind


def test_no_output_of_a_study_on_postgres_shows_its_password(tmp_path, postgres_url, monkeypatch, capfd):
    # Every command that shows the storage, on real studies (scripted trials): search with and
    # without a confirmation, a worker joining, search --workers (its workers stubbed), export,
    # report, dashboard.
    import optuna_dashboard

    import app.workers
    import search.prepare
    import search.study.loop
    from app.cli import main
    from tests.support.fakes import ctx

    postgres_url = with_password(postgres_url)  # as a user may give it: the password in the URL
    password = make_url(postgres_url).password
    assert password
    to_workers = []
    executor = ScriptedExecutor()
    monkeypatch.setattr(search.prepare, "launch_context", lambda model=None: ctx())
    monkeypatch.setattr(search.study.loop, "vllm_executor", lambda prep: executor.factory)
    monkeypatch.setattr(
        app.workers, "run_all", lambda commands, show, env: to_workers.append((commands, env)) or [0] * len(commands)
    )
    monkeypatch.setattr(optuna_dashboard, "run_server", lambda *args, **kw: None)
    runs = tmp_path / "runs"
    where = ["--storage", postgres_url, "--runs-dir", str(runs)]
    assert (
        main(["search", str(LOOP_SCENARIO), "--study", "unconfirmed", "--trials", "2", "--confirm-runs", "0", *where])
        == 0
    )
    assert main(["search", str(LOOP_SCENARIO), "--trials", "3", "--confirm-runs", "2", *where]) == 0
    assert main(["worker", "--study", "loop", "--trials", "4", *where]) == 0
    assert main(["search", str(LOOP_SCENARIO), "--workers", "2", "--trials", "4", "--confirm-runs", "2", *where]) == 0
    for command in ("export", "report", "dashboard"):
        assert main([command, str(LOOP_SCENARIO), *where]) == 0
    out, err = capfd.readouterr()
    shown = make_url(postgres_url).render_as_string(hide_password=True)
    lines = " ".join(out.split())  # as rich folded them, unfolded
    assert lines.count(f"storage {shown}") == 3 and f"joins study loop ({shown})" in lines  # not vacuous: it is shown
    assert password not in out + err
    [(commands, env)] = to_workers  # search --workers 2: the password in the workers' environment, not argv
    assert len(commands) == 2 and not any(password in arg for _, argv in commands for arg in argv)
    assert env == {"PGPASSWORD": password}
    written = {p.relative_to(runs).as_posix(): p.read_bytes() for p in runs.rglob("*") if p.is_file()}
    assert {"loop/best.yaml", "loop/pareto.yaml", "loop/report.html", "unconfirmed/best.yaml"} <= written.keys()
    assert all(f"in {shown}, trial".encode() in written[f"{study}/best.yaml"] for study in ("loop", "unconfirmed"))
    assert [name for name, content in written.items() if password.encode() in content] == []
    engine = create_engine(postgres_url)  # the study as stored: user attributes, notes, our records
    tables = MetaData()
    tables.reflect(engine)
    with engine.connect() as conn:
        assert [
            t.name for t in tables.sorted_tables if any(password in str(row) for row in conn.execute(select(t)))
        ] == []
    engine.dispose()
