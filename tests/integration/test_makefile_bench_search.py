"""`make bench-search` as the README gives it, narrowed, from the root of a fresh clone: the
table printed, runs/bench-search/summary.json with its default and trials_to_95 (no vLLM)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess

import pytest

from tests.support.postgres import fresh_clone

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make here")


def test_make_bench_search_from_a_fresh_clone_prints_the_table_and_writes_the_summary(tmp_path):
    clone = fresh_clone(tmp_path / "clone")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}, "PYTHONPATH": str(clone)}
    # its own process group, so that a run past the timeout takes the bench's worker processes with it
    proc = subprocess.Popen(
        ["make", "bench-search", "SAMPLERS=random sobol-tpe", "SEEDS=2", "BUDGETS=5"],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "bench-search" in done.stdout and "4 studies in" in done.stdout
    summary = json.loads((clone / "runs" / "bench-search" / "summary.json").read_text())
    assert summary["default"] == "sobol-tpe"  # mixed's, the recorded landscape's scenario
    assert set(summary["samplers"]) == {"random", "sobol-tpe"}
    for entry in summary["samplers"].values():
        assert entry["trials_to_95"] > 0 and entry["budgets"]["5"]["seeds"] == 2
    assert (clone / "runs" / "bench-search" / "table.md").read_text().startswith("| sampler |")
