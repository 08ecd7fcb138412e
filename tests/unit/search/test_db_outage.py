"""A database away for a while: the watch's retries and lines, the bound, the spool, and the
heartbeats that say nothing while it was away. Fake clock; real Optuna on SQLite for the last."""

from __future__ import annotations

import time
from datetime import datetime

import psycopg
import pytest
from sqlalchemy.exc import OperationalError

from search.study import coordination as coord
from search.study import spool
from search.study.coordination import DatabaseWatch
from search.study.errors import DatabaseUnreachable, StudyStopped
from storage.tables import StageRecord, TrialRecord
from tests.support.scripted_executor import ScriptedExecutor
from tests.support.study_loop import runner

REFUSED = "connection failed: Connection refused"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def _away() -> OperationalError:
    return OperationalError("SELECT 1", {}, psycopg.OperationalError(REFUSED))


def _watch(clock: Clock, notes: list[str], bound_s: float = 60) -> DatabaseWatch:
    return DatabaseWatch(
        "postgresql+psycopg://u:***@db/autotune", bound_s, notes.append, clock=clock, sleep=clock.sleep
    )


def _failing(times: int, result="stored"):
    calls = []

    def action():
        calls.append(1)
        if len(calls) <= times:
            raise _away()
        return result

    return action, calls


def test_an_outage_is_waited_out_with_backoff_and_one_line_each_way():
    clock, notes, failures = Clock(), [], []
    action, calls = _failing(3)
    assert _watch(clock, notes).ride(action, on_failure=lambda: failures.append(clock.now)) == "stored"
    assert len(calls) == 4 and len(failures) == 3
    assert clock.slept == [0.5, 1.0, 2.0]  # backoff
    assert notes == [
        f"database unreachable ({REFUSED}); waiting up to 60 s for it to come back (--db-outage-s); "
        "what is measured meanwhile is kept",
        "database reachable again after 4 s; the study goes on",
    ]


def test_past_the_bound_the_study_stops_saying_what_is_kept():
    clock, notes, failures = Clock(), [], []
    action, calls = _failing(1000)
    with pytest.raises(DatabaseUnreachable) as stopped:
        _watch(clock, notes, bound_s=20).ride(
            action,
            on_failure=lambda: failures.append(1),
            kept=lambda: ": trial 3's measurement is kept in spool/trial-0003.json",
        )
    assert isinstance(stopped.value, StudyStopped)  # the CLI: one line, exit code 1
    assert clock.now - 100.0 == 20 and sum(clock.slept) == 20
    assert len(failures) == len(calls)  # the spool is written before the first wait
    assert str(stopped.value) == (
        "the database (postgresql+psycopg://u:***@db/autotune) has been unreachable for 20 s "
        f"({REFUSED}); nothing measured is lost: trial 3's measurement is kept in spool/trial-0003.json. Once it "
        "is back, run the same command to go on (--db-outage-s sets how long a study waits)"
    )
    assert len(notes) == 1


def test_other_errors_go_through_at_once():
    clock, notes = Clock(), []

    def action():
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        _watch(clock, notes).ride(action)
    assert notes == [] and clock.slept == []


def test_heartbeats_tell_nothing_while_the_database_is_away_nor_for_a_grace_period_after():
    clock, notes = Clock(), []
    watch = _watch(clock, notes)
    assert watch.heartbeats_tell(grace_s=60)
    watch.lost(REFUSED)
    clock.now += 300
    assert not watch.heartbeats_tell(grace_s=60)
    watch.reachable()
    clock.now += 59
    assert not watch.heartbeats_tell(grace_s=60)  # the others have not had their grace period to beat
    clock.now += 1
    assert watch.heartbeats_tell(grace_s=60)


def test_the_spool_keeps_a_trials_record_whole(tmp_path):
    record = TrialRecord(
        trial_number=3,
        status="ok",
        metrics={"ttft_p95_ms": 512.0, "x": None},
        values=[80.0, float("inf")],
        started_at=datetime(2026, 11, 25, 16, 0, 1),
        stages=[StageRecord(stage_index=0, rate=1.5, samples={"ok": [True]})],
    )
    path = spool.keep(tmp_path, "loop", record, {"pid": 7, "token": "t"})
    assert [p.name for p in path.parent.iterdir()] == ["trial-0003.json"]  # no temporary file left
    [kept] = spool.kept(tmp_path, "loop")
    assert (kept.trial_number, kept.writer) == (3, {"pid": 7, "token": "t"})
    back = kept.record
    assert (back.status, back.metrics, back.values, back.started_at) == (
        "ok",
        {"ttft_p95_ms": 512.0, "x": None},
        [80.0, float("inf")],
        datetime(2026, 11, 25, 16, 0, 1),
    )
    assert [(s.stage_index, s.rate, s.samples) for s in back.stages] == [(0, 1.5, {"ok": [True]})]
    assert spool.kept(tmp_path, "another study") == []
    spool.drop(path)
    spool.drop(path)  # already stored and dropped by another worker: nothing to do
    assert spool.kept(tmp_path, "loop") == []


def test_a_heartbeat_missed_while_the_database_was_away_does_not_make_a_live_worker_dead(tmp_path):
    grace = coord.Coordination(grace_period_s=1)
    r = runner(tmp_path, ScriptedExecutor(), trials=1, coordination=grace)
    r.open()
    elsewhere = coord.WorkerId("another-host", 4242, 0.0, "their-loop")  # only its heartbeat can tell
    notes: list[str] = []
    watch = DatabaseWatch("sqlite", 60, notes.append)
    trial = coord.claim(r.study, r.storage, elsewhere, watch).trial
    time.sleep(2.1)  # its heartbeat is now older than a grace period of 1 s (SQLite counts whole seconds)
    [dead] = coord.dead_trials(r.study, r.storage, grace, DatabaseWatch("sqlite", 60, notes.append))
    assert dead.trial.number == trial.number  # a worker that saw no outage: the silence is the worker's
    watch.lost(REFUSED)
    assert coord.dead_trials(r.study, r.storage, grace, watch) == []  # the database away: nobody is judged
    watch.reachable()
    assert coord.dead_trials(r.study, r.storage, grace, watch) == []  # back, but no grace period to beat yet
    time.sleep(1.1)
    assert [d.trial.number for d in coord.dead_trials(r.study, r.storage, grace, watch)] == [trial.number]


def test_the_database_away_outside_a_ridden_step_is_one_line_and_exit_code_1(monkeypatch, capsys):
    """Its start, or the outputs after the study: no traceback either."""
    import app.cli

    def away(args):
        raise _away()

    monkeypatch.setattr(app.cli.outputs, "_cmd_export", away)
    assert app.cli.main(["export", "loop"]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"autotune: stopped: the database is unreachable ({REFUSED}); what is stored stays stored. "
        "Once it is back, run the same command to go on\n"
    )

    def bug(args):
        raise OperationalError("SELECT 1", {}, psycopg.errors.DeadlockDetected("deadlock detected"))

    monkeypatch.setattr(app.cli.outputs, "_cmd_export", bug)
    with pytest.raises(OperationalError):  # not an outage: the traceback a bug deserves
        app.cli.main(["export", "loop"])
