"""Many workers, one study, on a real PostgreSQL: worker processes running the real study loop
on scripted executors. No trial is run twice, calibration and the baselines happen once, every
finished trial has one snapshot, the budget holds; a killed worker's trial is run again by the
other (at once on this host, after the grace period from elsewhere); a live one's never is. The
same two workers as Ray tasks on a local Ray instance (`--backend ray`)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from app.workers import DEVICE_LOCK_DIR_ENV, Slot, available_cpus, run_all_on_ray
from storage import database, queries
from tests.support.cli import ForkedProcess, spawn_forked
from tests.support.paths import REPO
from tests.support.postgres import REQUIRES_POSTGRES, with_password
from tests.support.study_loop import LOOP_SCENARIO

pytestmark = REQUIRES_POSTGRES

STUDY = "loop"  # tests/support/study_loop.runner's study name
GRACE_S = 3


_STARTED: list[ForkedProcess | subprocess.Popen] = []


@pytest.fixture(autouse=True)
def no_worker_left():
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:  # a failed test's worker: not left behind
            proc.kill()
            proc.wait()


class Worker:
    """A worker process of its own (forked: tests/support/cli.py), its events in a file."""

    def __init__(self, url: str, runs_dir: Path, trials: int, slot: str, *extra: str) -> None:
        self.slot = slot
        self.out = runs_dir / f"worker-{slot}.jsonl"
        self.proc = spawn_forked(
            "tests.support.study_worker",
            url,
            runs_dir,
            trials,
            slot,
            "--grace",
            GRACE_S,
            *extra,
            stdout=self.out,
            stderr=runs_dir / f"worker-{slot}.err",
        )
        _STARTED.append(self.proc)

    def events(self) -> list[dict]:
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.strip()]

    def wait_for(self, event: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in self.events():
                if e["event"] == event:
                    return e
            assert self.proc.poll() is None, f"worker {self.slot} ended: {self.proc.communicate()[1]}"
            time.sleep(0.05)
        raise AssertionError(f"worker {self.slot}: no {event!r} within {timeout} s")

    def finish(self, timeout: float = 120) -> list[dict]:
        _, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, err
        return self.events()


def _study(url: str) -> optuna.Study:
    return optuna.load_study(study_name=STUDY, storage=url)


def _stored(url: str):
    with Session(database.open_db(url), expire_on_commit=False) as session:
        rec = queries.require_study(session, STUDY)
        return queries.trial_records(session, rec), queries.front_history(session, rec), rec


def _create(url: str, runs_dir: Path) -> None:
    """What `autotune search --workers N` does before it starts them: schema and study, once."""
    from search.study.coordination import Coordination
    from tests.support.scripted_executor import ScriptedExecutor
    from tests.support.study_loop import runner
    from tests.support.study_worker import CALIBRATED

    runner(runs_dir, ScriptedExecutor(), scenario=CALIBRATED, storage=url, coordination=Coordination()).open()


def _ran(events: list[dict]) -> list[int]:
    return [e["trial"] for e in events if e["event"] == "ran"]


def test_two_workers_share_one_study_without_running_anything_twice(postgres_url, tmp_path):
    url = postgres_url
    _create(url, tmp_path)
    workers = [Worker(url, tmp_path, 6, slot, "--seed", str(i)) for i, slot in enumerate(("cpu 0", "cpu 1"))]
    events = [w.finish() for w in workers]

    ran = [n for e in events for n in _ran(e)]
    assert len(ran) == len(set(ran)), f"a trial ran twice: {ran}"
    assert all(_ran(e) for e in events), "each worker ran trials"
    assert sum(e["event"] == "calibrated" for ev in events for e in ev) == 1  # whoever came first
    rows, snapshots, rec = _stored(url)
    assert rec.calibration is not None
    trials = _study(url).trials
    baselines = Counter(t.user_attrs.get("baseline") for t in trials if t.user_attrs.get("baseline"))
    assert baselines == {"vllm_defaults": 1}
    spent = sum(r.status != "duplicate" for r in rows)
    assert 6 <= spent <= 6 + 1  # the budget counts every worker's trials; overshoot at most workers - 1
    finished = sorted(t.number for t in trials if t.state == TrialState.COMPLETE)
    assert sorted(r.trial_number for r in rows) == finished
    assert [s.after_trial_number for s in snapshots] == finished  # one each, none lost, none twice
    # each trial's stored record says where it ran and what ran beside it, which the report shows
    assert {r.worker["slot"] for r in rows} == {"cpu 0", "cpu 1"}
    assert any(r.worker["neighbours"] for r in rows)
    beside = next(r for r in rows if r.worker["neighbours"])
    other = beside.worker["neighbours"][0]
    assert other["slot"] != beside.worker["slot"]
    from app.outputs import write_report

    html = write_report(url, STUDY, tmp_path / "report.html").read_text()
    assert "<th>worker slot</th>" in html
    assert f"{beside.worker['slot']}, beside trial {other['trial']} ({other['slot']})" in html


def test_a_live_worker_keeps_a_trial_longer_than_the_grace_period(postgres_url, tmp_path):
    url = postgres_url
    _create(url, tmp_path)
    # Seen from the other worker, this one runs elsewhere: only its heartbeat says it is alive.
    slow = Worker(url, tmp_path, 3, "cpu 0", "--host", "elsewhere", "--slow-trial-s", str(3 * GRACE_S))
    slow.wait_for("slow")
    other = Worker(url, tmp_path, 3, "cpu 1", "--seed", "1")
    events = [slow.finish(), other.finish()]
    assert not any("interrupted" in e.get("text", "") for ev in events for e in ev)
    assert {t.state for t in _study(url).trials} == {TrialState.COMPLETE}


@pytest.mark.parametrize("elsewhere", [False, True], ids=["same-host", "other-host"])
def test_a_killed_workers_trial_is_run_again_by_the_other(postgres_url, tmp_path, elsewhere):
    url = postgres_url
    _create(url, tmp_path)
    host = ["--host", "elsewhere"] if elsewhere else []
    victim = Worker(url, tmp_path, 4, "cpu 0", *host, "--slow-trial-s", "60")
    other = Worker(url, tmp_path, 4, "cpu 1", "--seed", "1")
    killed = victim.wait_for("slow", timeout=60)["trial"]
    victim.proc.send_signal(signal.SIGKILL)
    died = time.time()
    victim.proc.wait()
    events = other.finish()

    trials = _study(url).trials
    assert trials[killed].state == TrialState.FAIL
    [retry] = [t for t in trials if t.user_attrs.get("retry_of") == killed]
    assert retry.params == trials[killed].params and retry.state == TrialState.COMPLETE
    assert retry.number in _ran(events)
    [note] = [e for e in events if e.get("text") == f"trial {killed} was interrupted; it will run again"]
    requeued_after = note["t"] - died
    print(
        f"\nworker killed -> trial {killed} re-queued in {requeued_after:.2f} s ({'other host' if elsewhere else 'same host'})"
    )
    if elsewhere:  # only the heartbeat tells: the grace period, plus at most a trial and a poll
        assert GRACE_S - 1 <= requeued_after <= GRACE_S + 4
    else:  # its process is gone: at the other's next look, within a trial
        assert requeued_after < 2
    rows, snapshots, _ = _stored(url)
    finished = sorted(t.number for t in trials if t.state == TrialState.COMPLETE)
    assert sorted(r.trial_number for r in rows) == finished  # 0 finished trials lost
    assert [s.after_trial_number for s in snapshots] == finished
    assert sum(r.status != "duplicate" for r in rows) >= 4


def _watch_commands(proc: subprocess.Popen) -> list[tuple[int, str]]:
    """Every (pid, command line) `ps -ww -eo pid,args` showed (whole: -ww) while `proc` ran, sampled every 50 ms."""
    seen: set[tuple[int, str]] = set()
    while proc.poll() is None:
        listing = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True).stdout
        for line in listing.splitlines():
            pid, _, args = line.strip().partition(" ")
            seen.add((int(pid), args.strip()))
        time.sleep(0.05)
    return sorted(seen)


@pytest.mark.skipif(len(available_cpus()) < 2, reason="two workers need two cores")
@pytest.mark.parametrize("given", ["make-db", "with-password"])
def test_a_two_worker_study_shows_its_password_on_no_command_line_and_in_no_output(
    postgres_server, postgres_url, tmp_path, given
):
    """`autotune search --workers 2` with its real worker processes (scripted trials): on `make db`'s
    URL (a passfile, no password) no command line shows the password; on a URL a user gave with
    one, only the tuner's own (where the user typed it), not its workers'. Nothing the study wrote
    or printed holds it."""
    password = Path(make_url(postgres_url).query["passfile"]).read_text().strip().rsplit(":", 1)[1]
    url = postgres_url if given == "make-db" else with_password(postgres_url)
    runs = tmp_path / "runs"
    study = ["--workers", "2", "--trials", "4", "--confirm-runs", "1", "--storage", url, "--runs-dir", str(runs)]
    tuner = subprocess.Popen(
        [sys.executable, "-m", "tests.support.scripted_cli", "search", str(LOOP_SCENARIO), *study],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, DEVICE_LOCK_DIR_ENV: str(tmp_path / "locks")},
    )
    _STARTED.append(tuner)
    commands = _watch_commands(tuner)
    out, err = tuner.communicate(timeout=300)
    assert tuner.returncode == 0, out[-3000:] + err[-3000:]

    workers = [args for _, args in commands if "scripted_cli worker" in args]
    assert {args.split("--slot ")[1].split()[0] for args in workers} == {"cpu:0", "cpu:1"}  # seen, so not vacuous
    showing = [(pid, args) for pid, args in commands if password in args]
    assert showing == ([] if given == "make-db" else [(tuner.pid, showing[0][1])])
    assert password not in out + err
    written = [p for p in runs.rglob("*") if p.is_file()]
    assert {"loop/best.yaml", "loop/report.html"} <= {p.relative_to(runs).as_posix() for p in written}
    assert [p for p in written if password.encode() in p.read_bytes()] == []
    assert password not in postgres_server[0].log.read_text()  # the server's log
    assert sum(t.state == TrialState.COMPLETE for t in optuna.load_study(study_name=STUDY, storage=url).trials) >= 4


def test_two_ray_workers_share_one_study(postgres_url, tmp_path, capfd):
    ray = pytest.importorskip("ray")
    url = postgres_url
    _create(url, tmp_path)
    slots = [Slot.parse("cpu:0"), Slot.parse("cpu:1")]
    commands = [
        (
            f"[w{i}]",
            [
                "sh",
                "-c",
                f"cd {shlex.quote(str(REPO))} && exec "
                + shlex.join(
                    [
                        sys.executable,
                        "-m",
                        "tests.support.study_worker",
                        url,
                        str(tmp_path),
                        "6",
                        slot.label,
                        "--grace",
                        str(GRACE_S),
                        "--seed",
                        str(i),
                    ]
                ),
            ],
        )
        for i, slot in enumerate(slots)
    ]
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
    assert "[w0] {" in out and "[w1] {" in out  # each worker's lines, prefixed
    assert out.count('"event": "calibrated"') == 1
    assert subprocess.run(["pgrep", "-f", "raylet"], capture_output=True).returncode == 1  # none left
