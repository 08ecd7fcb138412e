"""`--backend ray`: two scripted workers as Ray tasks on a local Ray instance, one CPU each, on
the suite's real PostgreSQL: no trial run twice, calibration and baselines once, one snapshot
per finished trial; Ray is shut down and no raylet is left."""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections import Counter

import pytest
from optuna.trial import TrialState

from search.workers import Slot, run_all_on_ray
from tests.integration.test_workers_postgres import GRACE_S, HAVE_POSTGRES, _create, _stored, _study, server, url  # noqa: F401
from tests.support.paths import REPO

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.postgres,
              pytest.mark.skipif(not HAVE_POSTGRES, reason="no PostgreSQL server binaries (scripts/setup_postgres.sh)")]


def test_two_ray_workers_share_one_study(url, tmp_path, capfd):
    _create(url, tmp_path)
    slots = [Slot.parse("cpu:0"), Slot.parse("cpu:1")]
    commands = [(f"[w{i}]", ["sh", "-c", f"cd {shlex.quote(str(REPO))} && exec " + shlex.join(
        [sys.executable, "-m", "tests.support.study_worker", url, str(tmp_path), "6", slot.label,
         "--grace", str(GRACE_S), "--seed", str(i)])]) for i, slot in enumerate(slots)]
    assert run_all_on_ray(commands, slots, None) == [0, 0]
    assert not ray.is_initialized()

    rows, snapshots, rec = _stored(url)
    assert rec.calibration is not None
    trials = _study(url).trials
    baselines = Counter(t.user_attrs.get("baseline") for t in trials if t.user_attrs.get("baseline"))
    assert baselines == {"vllm_defaults": 1}
    assert 6 <= sum(r.status != "duplicate" for r in rows) <= 7
    finished = sorted(t.number for t in trials if t.state == TrialState.COMPLETE)
    assert sorted(r.trial_number for r in rows) == finished  # none run twice, none lost
    assert [s.after_trial_number for s in snapshots] == finished
    out = capfd.readouterr().out
    assert '[w0] {' in out and '[w1] {' in out  # each worker's lines, prefixed
    assert out.count('"event": "calibrated"') == 1
    assert subprocess.run(["pgrep", "-f", "raylet"], capture_output=True).returncode == 1  # none left
