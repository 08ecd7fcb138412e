"""Which running trials are a dead worker's, on the real study loop (SQLite, scripted executor):
never a live one's, a gone process's at once, and every finished trial gets its snapshot."""

from __future__ import annotations

import socket
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from search.study import coordination as coord
from search.study.attributes import mark_claimed
from search.study.recording import Recording
from tests.support.scripted_executor import ScriptedExecutor
from tests.support.study_loop import Recorder, optuna_trials, rows, runner


def _worker(pid: int, started: float, token: str = "t") -> dict:
    return {"host": socket.gethostname(), "pid": pid, "started": started, "token": token, "slot": None}


def test_a_worker_is_gone_only_when_its_process_is_certainly_gone():
    me = coord.WorkerId.this("cpu 0")
    assert not coord.gone_here({**me.as_dict(), "host": "elsewhere"})  # another host: only its heartbeat tells
    with coord.live(me):
        assert not coord.gone_here(me.as_dict())  # this process, its loop running
    assert coord.gone_here(me.as_dict())  # this process, its loop ended (an interrupt the process survived)
    no_such_pid = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # above every pid this host gives out
    assert coord.gone_here(_worker(no_such_pid, me.started))  # no such process
    assert coord.gone_here(_worker(me.pid, me.started - 100))  # the pid reused by another process
    assert not coord.gone_here(None)


def test_a_trial_killed_between_tell_and_snapshot_gets_its_snapshot_on_resume(tmp_path, monkeypatch):
    real = Recording.snapshot
    calls = []

    def killed_once(self, rec, after):
        calls.append(after)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, rec, after)

    monkeypatch.setattr(Recording, "snapshot", killed_once)
    with pytest.raises(KeyboardInterrupt):
        runner(tmp_path, ScriptedExecutor(), trials=3).run()
    monkeypatch.setattr(Recording, "snapshot", real)
    assert [t.state for t in optuna_trials(runner(tmp_path, ScriptedExecutor()))][:2] == [TrialState.COMPLETE] * 2

    r = runner(tmp_path, ScriptedExecutor(), trials=3)
    r.run()
    from sqlalchemy.orm import Session

    from storage import database, queries

    with Session(database.open_db(r.prep.storage_url)) as session:
        history = queries.front_history(session, queries.require_study(session, "loop"))
    numbers = [row.trial_number for row in rows(r)]
    assert calls[1] in numbers and [s.after_trial_number for s in history] == numbers


def test_a_running_trial_with_no_worker_recorded_waits_for_the_grace_period(tmp_path):
    """Asked by an older version (or killed between ask and its first heartbeat): taken over only
    once it has run longer than the grace period."""
    r = runner(tmp_path, ScriptedExecutor(), trials=1)
    r.open()
    coord.ask(r.study)  # RUNNING, no heartbeat, no worker
    assert coord.dead_trials(r.study, r.storage, coord.Coordination(grace_period_s=60)) == []
    import time

    time.sleep(1.1)
    [dead] = coord.dead_trials(r.study, r.storage, coord.Coordination(grace_period_s=1))
    assert dead.why == "no worker recorded and running for over 1 s"
    events = Recorder()
    again = runner(
        tmp_path, ScriptedExecutor(), trials=1, observers=[events], coordination=coord.Coordination(grace_period_s=1)
    )
    again.run()
    assert "trial 0 was interrupted; it will run again" in events.notes


def test_a_trial_in_memory_whose_loop_ended_is_left_failed_for_want_of_a_retry_callback():
    """`LocalStorage` queues no retries (no callback): a trial its ended loop left behind (an
    interrupt the process survived, then the same study run again) is failed, and requeue says it
    queued nothing, instead of calling the callback it does not have."""
    store = coord.LocalStorage()
    study = optuna.create_study(storage=store)
    trial = coord.ask(study)
    mark_claimed(trial, coord.WorkerId.this(None).as_dict(), None)  # its loop never marked live: gone here
    [dead] = coord.dead_trials(study, store, coord.Coordination())
    assert coord.requeue(study, store, dead.trial) is None
    assert [t.state for t in study.get_trials()] == [TrialState.FAIL]
