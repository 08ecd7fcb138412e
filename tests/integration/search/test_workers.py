"""Workers as processes: a CPU slot pins the worker and what it starts, the parent prefixes their
lines and collects every exit code, a worker's password reaches it through its environment only,
and the CLI's refusals run as a user runs them (one clear line, exit 2, nothing started).
"""

from __future__ import annotations

import os
import sys

import pytest

from app.workers import run_all, worker_env
from tests.support.cli import autotune_forked


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_a_cpu_slot_pins_the_worker_and_what_it_starts():
    out = []
    code = [
        sys.executable,
        "-c",
        "import os, subprocess, sys; from app.workers import Slot; Slot.parse(sys.argv[1]).apply(); "
        "print(sorted(os.sched_getaffinity(0)), os.environ['VLLM_CPU_OMP_THREADS_BIND']); "
        "subprocess.run([sys.executable, '-c', 'import os; print(sorted(os.sched_getaffinity(0)))'])",
    ]
    first = min(os.sched_getaffinity(0))
    assert run_all([("[w0]", [*code, f"cpu:{first}"])], out.append) == [0]
    assert out == [f"[w0] [{first}] {first}", f"[w0] [{first}]"]  # a child (the server) stays on the slot


def test_run_all_prefixes_each_workers_lines_and_returns_every_exit_code():
    out = []
    codes = run_all(
        [
            ("[w0 cpu 0]", [sys.executable, "-c", "print('a'); print('b')"]),
            ("[w1 cpu 1]", [sys.executable, "-c", "import sys; print('c'); sys.exit(3)"]),
        ],
        out.append,
    )
    assert codes == [0, 3]
    assert sorted(out) == ["[w0 cpu 0] a", "[w0 cpu 0] b", "[w1 cpu 1] c"]
    assert out.index("[w0 cpu 0] a") < out.index("[w0 cpu 0] b")


def test_a_worker_process_sees_the_database_password_in_its_environment_not_on_its_command_line():
    storage = "postgresql+psycopg://tuner:s3cret@db.example:5432/studies?sslmode=require"
    out: list[str] = []
    code = "import os, sys; print(os.environ['PGPASSWORD'], 's3cret' in ' '.join(sys.argv))"
    assert run_all([("[w0]", [sys.executable, "-c", code])], out.append, env=worker_env(storage)) == [0]
    assert out == ["[w0] s3cret False"]


def test_many_workers_on_sqlite_are_refused_with_make_db(tmp_path):
    done = autotune_forked("search", "mixed", "--workers", "2", "--runs-dir", tmp_path, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "autotune: error: --workers 2 needs a database server the workers share; SQLite (the default "
        "runs/autotune.db) takes one worker per study. Run `make db` (autotune db start) and pass the URL it "
        "prints: make search WORKERS=2 STORAGE='<URL>'"
    )
    assert not (tmp_path / "autotune.db").exists()


def test_a_worker_for_a_study_that_does_not_exist_is_one_line(tmp_path):
    db = tmp_path / "none.db"
    done = autotune_forked("worker", "--storage", f"sqlite:///{db}", "--study", "mine", "--runs-dir", tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        f"autotune: error: no study named 'mine' in sqlite:///{db}; start it with "
        "`autotune search SCENARIO --storage URL --study NAME`, then add workers"
    )
    assert not db.exists()
