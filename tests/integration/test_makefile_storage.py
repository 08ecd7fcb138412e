"""The Makefile's STORAGE=: the URL reaches the command whole, whatever its password holds, and
make's echo of the command does not show the password."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make here")


def _make(*args: str) -> subprocess.CompletedProcess:
    # -o setup: the environment is this test run's, not set up again; PYTHONPATH: this checkout's code
    return subprocess.run(
        ["make", "--no-print-directory", "-o", "setup", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_make_worker_passes_the_url_whole_and_echoes_no_password():
    port = _closed_port()
    proc = _make("worker", f"STORAGE=postgresql+psycopg://tuner:pa'ss&wo;rd@127.0.0.1:{port}/autotune", "STUDY=s")
    assert proc.returncode == 2
    assert "pa'ss&wo;rd" not in proc.stdout + proc.stderr
    assert proc.stdout.strip() == '.venv/bin/autotune worker --storage "$STORAGE" --study s'
    assert (
        f"autotune: error: --storage postgresql+psycopg://tuner:***@127.0.0.1:{port}/autotune: the database "
        f"does not answer" in proc.stderr
    )  # the CLI got the URL whole: one word, nothing cut at ' & or ;


def test_make_worker_without_storage_is_the_one_line_of_an_empty_url():
    proc = _make("worker", "STUDY=s")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[0] == (
        "autotune: error: --storage is empty (an unset variable?); pass a database "
        "URL: the one `make db` prints, or sqlite:///PATH/autotune.db"
    )
