"""A database restart during a study, on a real PostgreSQL (the suite's, stopped and started
here): ridden out, no measurement lost, nothing run twice; past the bound, one line and exit
code 1, and the same command resumes with the kept trial stored first. The same for two worker
processes sharing the study."""

from __future__ import annotations

import json
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

import app.cli
from search.study.coordination import Coordination
from search.study.spool import spool_dir
from tests.support.cli import spawn_forked
from tests.support.postgres import REQUIRES_POSTGRES
from tests.support.scripted_executor import ScriptedCalibration, ScriptedExecutor, measured
from tests.support.study_loop import Recorder, optuna_trials, rows, runner

pytestmark = REQUIRES_POSTGRES

CALIBRATED = Path(__file__).resolve().parents[1] / "fixtures" / "scenarios" / "loop_calibrated.yaml"


@pytest.fixture
def server(postgres_server):
    """The suite's PostgreSQL, running again after the test whatever happened in it."""
    db = postgres_server[0]
    yield db
    db.start()


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.05)


def _outages(notes: list[str]) -> tuple[list[str], list[str]]:
    return (
        [n for n in notes if n.startswith("database unreachable (")],
        [n for n in notes if n.startswith("database reachable again after")],
    )


def _stop_while_measuring(server, number: int):
    """A `before` for the scripted executor: the database stops while trial `number` measures."""

    def before(plan) -> None:
        if plan.number == number:
            server.stop()

    return before


def test_a_database_restart_during_a_trial_is_ridden_out_and_its_measurement_stored_once(
    tmp_path, postgres_url, server
):
    spooled: list[list[str]] = []

    def restart_once_spooled() -> None:  # the trial's record on disk before the database is back
        _wait_for(lambda: list(spool_dir(tmp_path / "loop").glob("trial-*.json")), 60, "spool file")
        spooled.append([p.name for p in spool_dir(tmp_path / "loop").iterdir()])
        time.sleep(3)
        server.start()

    threading.Thread(target=restart_once_spooled, daemon=True).start()
    executor, events = ScriptedExecutor(before=_stop_while_measuring(server, 1)), Recorder()
    r = runner(
        tmp_path,
        executor,
        trials=3,
        storage=postgres_url,
        observers=[events],
        coordination=Coordination(heartbeat_interval_s=1, grace_period_s=3, db_outage_s=120),
    )
    r.run()

    lost, back = _outages(events.notes)
    assert len(lost) == 1 and len(back) == 1, events.notes
    assert spooled == [["trial-0001.json"]] and list(spool_dir(tmp_path / "loop").iterdir()) == []
    ran = [p.number for p in executor.plans]
    assert len(ran) == len(set(ran)) and not [n for n in events.notes if "interrupted" in n]
    stored = {row.trial_number: row for row in rows(r)}
    assert sorted(stored) == list(range(len(stored))) and set(ran) <= set(stored)
    trial_1 = next(p for p in executor.plans if p.number == 1)
    assert stored[1].metrics == measured(trial_1).metrics and stored[1].status == "ok"
    assert stored[1].finished_at < stored[2].started_at - timedelta(seconds=2)  # when measured, not when stored
    assert {t.state for t in optuna_trials(r)} == {TrialState.COMPLETE}
    assert sum(not row.duplicate_of and row.status == "ok" for row in stored.values()) == 3


def test_past_the_bound_the_study_stops_with_one_line_and_the_same_command_resumes(
    tmp_path, postgres_url, server, monkeypatch, capsys
):
    first = ScriptedExecutor(before=_stop_while_measuring(server, 1))
    r = runner(
        tmp_path,
        first,
        trials=3,
        storage=postgres_url,
        coordination=Coordination(heartbeat_interval_s=1, grace_period_s=3, db_outage_s=3),
    )
    monkeypatch.setattr(app.cli.studies, "_cmd_search", lambda args: r.run() and 0)
    assert app.cli.main(["search", "loop", "--db-outage-s", "3"]) == 1  # the CLI's own mapping
    err = capsys.readouterr().err
    [kept] = spool_dir(tmp_path / "loop").glob("trial-*.json")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("autotune: stopped: the database (postgresql+psycopg://autotune@127.0.0.1:")
    assert "has been unreachable for 3 s" in err and f"trial 1's measurement is kept in {kept}" in err

    server.start()
    again, events = ScriptedExecutor(), Recorder()
    resumed = runner(tmp_path, again, trials=3, storage=postgres_url, observers=[events])
    resumed.run()
    assert events.notes.index(
        f"trial 1: its measurement, kept in {kept} while the database was away, is stored"
    ) < events.notes.index("trial 1: finished from its stored record")
    assert not kept.exists()
    trial_1 = next(p for p in first.plans if p.number == 1)
    assert trial_1.fingerprint not in {p.fingerprint for p in again.plans}  # not run again
    stored = {row.trial_number: row for row in rows(resumed)}
    assert stored[1].metrics == measured(trial_1).metrics
    assert {t.state for t in optuna_trials(resumed)} == {TrialState.COMPLETE}
    assert sum(not row.duplicate_of for row in stored.values()) == 3


def test_a_tuner_killed_while_the_database_is_away_finds_its_spool_on_the_next_run(tmp_path, postgres_url, server):
    """A worker process whose slow trial ends while the database is stopped: killed (SIGKILL)
    once its measurement is spooled; the next run stores it before anything else."""
    out = tmp_path / "worker.jsonl"
    proc = spawn_forked(
        "tests.support.study_worker",
        postgres_url,
        tmp_path,
        "3",
        "cpu 0",
        "--slow-trial-s",
        "2",
        "--grace",
        "3",
        stdout=out,
        stderr=tmp_path / "worker.err",
    )
    try:
        _wait_for(lambda: '"event": "slow"' in out.read_text(), 120, "slow trial")
        server.stop()
        _wait_for(lambda: list(spool_dir(tmp_path / "loop").glob("trial-*.json")), 60, "spool file")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    events = [json.loads(line) for line in out.read_text().splitlines()]
    slow = next(e["trial"] for e in events if e["event"] == "slow")
    assert [e["text"] for e in events if e["event"] == "note" and e["text"].startswith("database unreachable")]

    server.start()
    notes = Recorder()
    again = ScriptedExecutor()
    r = runner(
        tmp_path,
        again,
        scenario=CALIBRATED,
        trials=3,
        storage=postgres_url,
        observers=[notes],
        calibrate=ScriptedCalibration(),
    )
    r.run()
    assert notes.notes[0].startswith(f"trial {slow}: its measurement, kept in ")
    assert f"trial {slow}: finished from its stored record" in notes.notes
    assert slow not in [p.number for p in again.plans]
    ran = [e["params"] for e in events if e["event"] == "ran"] + again.params
    assert all(ran.count(p) == 1 for p in ran)  # nothing measured twice
    assert {t.state for t in optuna.load_study(study_name="loop", storage=postgres_url).trials} == {TrialState.COMPLETE}


def test_two_workers_ride_out_a_restart_and_neither_takes_the_others_trial(tmp_path, postgres_url, server):
    """The database stopped for longer than the grace period while one worker measures a slow
    trial and the other waits or runs quick ones: both go on, no trial is taken for dead, none
    is run twice."""
    runner(tmp_path, ScriptedExecutor(), scenario=CALIBRATED, storage=postgres_url, coordination=Coordination()).open()
    procs, outs = [], []
    for slot, extra in (("cpu 0", ["--slow-trial-s", "20"]), ("cpu 1", [])):
        outs.append(tmp_path / f"worker-{slot[-1]}.jsonl")
        procs.append(
            spawn_forked(
                "tests.support.study_worker",
                postgres_url,
                tmp_path,
                "5",
                slot,
                "--grace",
                "3",
                *extra,
                stdout=outs[-1],
                stderr=outs[-1].with_suffix(".err"),
            )
        )
    try:
        _wait_for(lambda: '"event": "slow"' in outs[0].read_text(), 120, "slow trial")
        time.sleep(2)
        server.stop()
        time.sleep(10)  # over three grace periods with no heartbeat written by anyone
        server.start()
        for proc in procs:
            _, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, err[-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    events = [[json.loads(line) for line in out.read_text().splitlines()] for out in outs]
    notes = [[e["text"] for e in evs if e["event"] == "note"] for evs in events]
    for said in notes:
        assert len(_outages(said)[0]) == 1 and len(_outages(said)[1]) == 1, said
        assert not [n for n in said if "interrupted" in n or "for dead" in n], said
    slow = next(e["trial"] for e in events[0] if e["event"] == "slow")
    ran = [e["trial"] for evs in events for e in evs if e["event"] == "ran"]
    assert len(ran) == len(set(ran)) and slow in ran
    study = optuna.load_study(study_name="loop", storage=postgres_url)
    assert {t.state for t in study.trials} == {TrialState.COMPLETE}
