"""The command line on bad input: clear errors, before any server starts. Each command runs in a
process of its own, forked from an interpreter that has imported the tuner (tests.support.cli);
one, the unknown scenario, in a fresh interpreter as a user starts it."""

import importlib.util
import os
import socket
import subprocess
import sys

import pytest

from tests.support.cli import autotune, autotune_forked
from tests.support.paths import REPO
from tests.support.study_loop import LOOP_SCENARIO


def test_malformed_scenario_is_rejected_before_any_server_starts(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: bad\ntitle: t\nworkload:\n  endpoint: chat\n  num_requests: 4\n"
        "  arrival: {mode: closed, concurrency: 1}\n  prompt_tokens: 10\n  output_tokens: 4\n"
        "objectives:\n  - {metric: ttft_p95_ms, direction: minimize}\n"
        "search_space:\n  max_num_seqs: {low: 4, high: 2}\n  gpu_util: {low: 0.1, high: 0.9}\n"
    )
    proc = autotune_forked(
        "search", bad, "--storage", f"sqlite:///{tmp_path / 'x.db'}", "--runs-dir", tmp_path, timeout=120
    )
    assert proc.returncode == 2
    assert f"autotune: error: {bad}: invalid scenario" in proc.stderr
    assert "search_space: unknown parameter(s) gpu_util; tunable parameters:" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "bad").exists()  # no study dir: nothing was started


def test_unknown_scenario_name(tmp_path):
    # a fresh interpreter: what it prints beside the refusal (an import's warning, say) counts too
    proc = autotune("search", "chatbot", "--runs-dir", tmp_path, timeout=60)
    assert proc.returncode == 2
    assert (
        "unknown scenario 'chatbot'; built-in scenarios: api_service, batch_processing, chat_sessions, mixed, online_chat"
        in proc.stderr
    )


def test_confirm_needs_a_stored_study_and_creates_nothing_without_one(tmp_path):
    db = tmp_path / "none.db"
    proc = autotune_forked("confirm", "mixed", "--storage", f"sqlite:///{db}", "--runs-dir", tmp_path, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        f"autotune: error: no study named 'mixed' in sqlite:///{db}; run `autotune search mixed` first" in proc.stderr
    )
    assert not db.exists() and not (tmp_path / "mixed").exists()


def test_confirm_runs_must_be_a_count(tmp_path):
    proc = autotune_forked("search", "mixed", "--confirm-runs", "-1", "--runs-dir", tmp_path, timeout=60)
    assert proc.returncode == 2 and "argument --confirm-runs: must be a whole number >= 0, got '-1'" in proc.stderr


@pytest.mark.parametrize(
    "flag, value, said",
    [
        ("--trials", "0", "must be a whole number >= 1"),  # 0 used to mean the scenario's default budget
        ("--trials", "-2", "must be a whole number >= 1"),
        ("--timeout-min", "-1", "must be a number of minutes > 0"),  # used to run no trial and report the study
        ("--timeout-min", "0", "must be a number of minutes > 0"),  # used to mean no limit
    ],
)
def test_the_search_budget_must_be_positive(tmp_path, flag, value, said):
    proc = autotune_forked("search", "mixed", flag, value, "--runs-dir", tmp_path, timeout=60)
    assert proc.returncode == 2 and f"argument {flag}: {said}, got '{value}'" in proc.stderr
    assert not any(tmp_path.iterdir())  # refused before anything is created


def test_a_scenario_given_by_path_names_the_study_as_search_does(tmp_path):
    # `search configs/x.yaml` stores the study under the scenario's `name:`; export, report and
    # dashboard given the same path must look for that study, not for one named after the path.
    from search.scenario import CONFIG_DIR

    copy = tmp_path / "my-mixed.yaml"
    copy.write_text((CONFIG_DIR / "mixed.yaml").read_text())
    db = tmp_path / "none.db"
    for command, missing in (
        ("report", "no study named 'mixed' in"),
        ("export", "no study named 'mixed' in"),
        ("dashboard", "no study database at"),
    ):  # readers: none creates the database it lacks
        proc = autotune_forked(command, copy, "--storage", f"sqlite:///{db}", "--runs-dir", tmp_path, timeout=120)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert f"autotune: error: {missing} sqlite:///{db}; run `autotune search {copy}` first" in proc.stderr
        assert not db.exists()


def test_the_dashboard_on_a_busy_port_is_one_line_and_publishes_nothing(tmp_path):
    import optuna
    from optuna_dashboard import get_note

    from tests.support.scripted_executor import ScriptedExecutor
    from tests.support.study_loop import runner

    r = runner(tmp_path, ScriptedExecutor(), trials=2)
    r.run()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = autotune_forked(
            "dashboard", LOOP_SCENARIO, "--storage", r.prep.storage_url, "--study", "loop", "--port", port, timeout=120
        )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (
        f"autotune: error: --port {port}: cannot serve on 127.0.0.1:{port} (Address "
        "already in use); pass a free port with --port (make dashboard PORT=)"
    )
    study = optuna.load_study(study_name="loop", storage=r.prep.storage_url)
    assert not get_note(study)  # nothing published before the refusal


def test_a_missing_workload_file_is_one_line(tmp_path):
    missing = tmp_path / "missing.yaml"
    proc = autotune_forked("load", "--workload", missing, "--url", "http://127.0.0.1:9", timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"autotune: error: --workload {missing}: no such file"


def test_a_study_name_cannot_leave_the_runs_directory(tmp_path):
    proc = autotune_forked("search", "mixed", "--study", "../elsewhere", "--runs-dir", tmp_path, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "argument --study: '../elsewhere': use letters, digits" in proc.stderr
    assert not (tmp_path.parent / "elsewhere").exists()


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _no_driver(name: str) -> None:
    import importlib.util

    if importlib.util.find_spec(name) is not None:
        pytest.skip(f"{name} is installed here")


@pytest.mark.parametrize(
    "case", ["not_sqlite", "malformed", "no_driver", "no_answer", "runs_dir_under_a_file", "storage_is_a_directory"]
)
def test_storage_that_cannot_hold_a_study_is_one_line_and_starts_nothing(tmp_path, case):
    not_sqlite = tmp_path / "notes.db"
    not_sqlite.write_text("my notes, not a database\n")
    (tmp_path / "file").write_text("x")
    runs = tmp_path / "runs"
    storage, said = {
        "not_sqlite": (
            f"sqlite:///{not_sqlite}",
            f"--storage sqlite:///{not_sqlite}: {not_sqlite} is not a SQLite "
            f"database; name another file (it is created) or move this one away",
        ),
        "malformed": (
            "runs/autotune.db",
            "--storage 'runs/autotune.db' is not a database URL; use "
            "sqlite:///PATH/autotune.db or DIALECT+DRIVER://USER:PASSWORD@HOST/DATABASE",
        ),
        "no_driver": (
            "postgresql+psycopg2://tuner@127.0.0.1/autotune",
            "--storage postgresql+psycopg2://tuner@127.0.0.1/autotune: its driver 'psycopg2' is not "
            "installed; install it (.venv/bin/pip install psycopg2) or use sqlite:///PATH",
        ),
        "no_answer": (
            f"postgresql+psycopg://tuner:secret@127.0.0.1:{(port := _closed_port())}/autotune",
            f"--storage postgresql+psycopg://tuner:***@127.0.0.1:{port}/autotune: the database does not "
            f'answer (connection failed: connection to server at "127.0.0.1", port {port} failed: '
            f"Connection refused); start it, or check the host, port and credentials",
        ),
        "runs_dir_under_a_file": (
            None,
            f"--runs-dir {tmp_path / 'file' / 'runs'} cannot be created: "
            f"{tmp_path / 'file'} is not a directory; choose a directory you can write to",
        ),
        "storage_is_a_directory": (
            f"sqlite:///{tmp_path}",
            f"--storage sqlite:///{tmp_path}: {tmp_path} is a "
            f"directory; name a file, e.g. sqlite:///{tmp_path / 'autotune.db'}",
        ),
    }[case]
    if case == "no_driver":
        _no_driver("psycopg2")
    if case == "no_answer" and importlib.util.find_spec("psycopg") is None:
        pytest.skip("psycopg is not installed (the missing-driver case stands for it)")
    if case == "runs_dir_under_a_file":
        runs = tmp_path / "file" / "runs"
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = autotune_forked(
        "search", LOOP_SCENARIO, "--runs-dir", runs, *(["--storage", storage] if storage else []), timeout=60
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"autotune: error: {said}"
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no runs dir, no database: nothing started
    assert not_sqlite.read_text() == "my notes, not a database\n"


def test_a_read_only_runs_directory_is_one_line(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    command = [sys.executable, "-m", "app.cli", "search", str(LOOP_SCENARIO), "--runs-dir", str(runs)]
    if os.geteuid() == 0:  # root writes through any mode bits: a read-only bind mount in a private namespace
        if subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0:
            pytest.skip("running as root without the right to make a read-only mount")
        command = ["unshare", "--mount", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"', str(runs), *command]
    else:
        runs.chmod(0o555)
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    runs.chmod(0o755)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"autotune: error: --runs-dir {runs} is read-only (")
    assert proc.stderr.strip().endswith("); choose a directory you can write to")
    assert list(runs.iterdir()) == []


def test_export_on_a_file_that_is_not_a_database_is_one_line(tmp_path):
    not_sqlite = tmp_path / "notes.db"
    not_sqlite.write_text("my notes\n")
    proc = autotune_forked("export", "loop", "--storage", f"sqlite:///{not_sqlite}", "--runs-dir", tmp_path, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{not_sqlite} is not a SQLite database" in proc.stderr


def test_the_dashboard_serves_a_database_that_lacks_the_named_study(tmp_path, monkeypatch, capsys):
    # the dashboard shows every study of the database: a name it lacks is a note, not a refusal
    from app import cli
    from app.outputs import dashboard
    from tests.support.scripted_executor import ScriptedExecutor
    from tests.support.study_loop import runner

    r = runner(tmp_path, ScriptedExecutor(), trials=2)
    r.run()
    served = []
    monkeypatch.setattr(dashboard, "serve", lambda url, port: served.append((url, port)))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert (
        cli.main(
            ["dashboard", str(LOOP_SCENARIO), "--storage", r.prep.storage_url, "--study", "other", "--port", str(port)]
        )
        == 0
    )
    assert served == [(r.prep.storage_url, port)]
    assert "note: no study named 'other' in this database" in capsys.readouterr().err
