"""`make search SCENARIO=mixed DRY_RUN=1 TIMEOUT_MIN=30`, as the README writes it, from the project
root on the default paths: the study's plan, nothing started and nothing created."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make here")


def test_make_search_dry_run_says_the_stage_sizes_and_starts_nothing():
    db = REPO / "runs" / "autotune.db"
    existed = db.exists()
    proc = subprocess.run(
        ["make", "--no-print-directory", "-o", "setup", "search", "SCENARIO=mixed", "DRY_RUN=1", "TIMEOUT_MIN=30"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())  # the console folds long lines
    assert "--timeout-min 30 --dry-run" in out and "dry run of study mixed (configs/mixed.yaml): nothing started" in out
    assert "140 requests a stage, run on to 210 while undecided: at 210, its 147 short requests decide" in out
    if not existed:  # a clean clone: no calibration to plan the seconds from, and none created
        assert "no calibration stored for study 'mixed'" in out and not db.exists()
    else:
        assert "within the budget of 30 min:" in out or "no calibration stored" in out
    assert "Traceback" not in proc.stderr
