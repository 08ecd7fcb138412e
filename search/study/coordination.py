"""Many workers, one study: what a worker holds of it through the database (its claims and
heartbeats), nothing else, and how it rides out that database going away for a while.

Trials are claimed through Optuna (`study.ask` pops a queued trial under a row lock on
PostgreSQL) and kept alive with Optuna's RDB heartbeats: each worker records its running trial's
heartbeat from a small thread (Optuna's own heartbeat thread runs only inside `study.optimize`,
and the tuner asks and tells). A RUNNING trial is taken over by another worker only when its
worker is certainly gone: its heartbeat is older than the grace period (Optuna's own test), or
its worker ran on this host and that process no longer exists (at once, as a resume after a kill
needs). A live worker's trial is never touched. The taking over is Optuna's too: the trial is
failed (one worker wins that update) and `RetryHeartbeatStaleTrialCallback` queues it again.

A database that is away for a while (a restart, a failover, a pod moved) is ridden out. The
study's reads and writes go through `DatabaseWatch.ride`: an error that says the connection is
lost or refused (`storage.connection.connection_lost`) is retried with backoff until the
database answers again, or until it has been away `bound_s` (`--db-outage-s`): then
`DatabaseUnreachable`, one line and exit code 1, and the same command resumes. Any other error
goes through at once.

One watch per study loop, shared with its heartbeat thread: whoever notices first, the database
going away is said once and its return once. When the database was away, every worker's
heartbeats stopped with it: while it is away, and for a grace period after it came back, the
other workers' heartbeats tell nothing (`DatabaseWatch.heartbeats_tell`): a heartbeat missed
then is the database's silence, not its worker's, and a worker that was waiting like this one
writes its next one within the grace period.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import optuna
import psutil
from optuna.storages import InMemoryStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial, TrialState

from search.study.attributes import WORKER_ATTR, mark_claimed
from search.study.errors import DatabaseUnreachable
from search.trial_results import Neighbour, Placement
from storage.connection import connection_lost

# -- the database away -------------------------------------------------------------------------

T = TypeVar("T")

DEFAULT_BOUND_S = 300  # a restart or a failover takes seconds to a minute or two
FIRST_RETRY_S = 0.5
LONGEST_RETRY_S = 10.0


class DatabaseWatch:
    """What this worker has seen of its database (`shown`: its URL, password hidden). `note`
    says the two lines; it may be called from the heartbeat thread."""

    def __init__(
        self,
        shown: str,
        bound_s: float,
        note: Callable[[str], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] | None = None,
    ):
        self.shown, self.bound_s, self.note, self.clock = shown, bound_s, note, clock
        self._lock = threading.Lock()
        self._came_back = threading.Event()  # a wait ends early when the heartbeat finds it back
        self.sleep = sleep or self._came_back.wait
        self.away_since: float | None = None  # on `clock`; None: reachable as far as this worker knows
        self.back_at: float | None = None  # when it last came back

    def lost(self, reason: str) -> float:
        """The database is away (since now, unless already): said once. Returns for how long."""
        with self._lock:
            now = self.clock()
            if self.away_since is None:
                self.away_since = now
                self._came_back.clear()
                self.note(
                    f"database unreachable ({reason}); waiting up to {self.bound_s:.0f} s for it to come "
                    f"back (--db-outage-s); what is measured meanwhile is kept"
                )
            return now - self.away_since

    def reachable(self) -> None:
        """The database answered: if it was away, said once."""
        with self._lock:
            if self.away_since is None:
                return
            now = self.clock()
            self.note(f"database reachable again after {now - self.away_since:.0f} s; the study goes on")
            self.away_since, self.back_at = None, now
            self._came_back.set()

    def heartbeats_tell(self, grace_s: float) -> bool:
        """Whether a heartbeat older than `grace_s` means its worker is gone: not while the
        database is away, nor until it has been back for `grace_s`."""
        with self._lock:
            return self.away_since is None and (self.back_at is None or self.clock() - self.back_at >= grace_s)

    def ride(
        self,
        action: Callable[[], T],
        *,
        on_failure: Callable[[], None] | None = None,
        kept: Callable[[], str] | None = None,
    ) -> T:
        """`action()`, again with backoff while the database is away. `on_failure` runs after
        each failed attempt, before the wait (a rollback; the spool, before the first retry);
        `kept` says what the spool holds, for the line that ends the study past the bound."""
        wait = FIRST_RETRY_S
        while True:
            try:
                result = action()
            except Exception as e:
                reason = connection_lost(e)
                if reason is None:
                    raise
                away = self.lost(reason)
                if on_failure is not None:
                    on_failure()
                if away >= self.bound_s:
                    raise DatabaseUnreachable(
                        f"the database ({self.shown}) has been unreachable for {away:.0f} s ({reason}); "
                        f"nothing measured is lost{kept() if kept else ''}. Once it is back, run the same "
                        f"command to go on (--db-outage-s sets how long a study waits)"
                    ) from e
                self.sleep(min(wait, self.bound_s - away))
                wait = min(2 * wait, LONGEST_RETRY_S)
                continue
            self.reachable()
            return result


# -- the workers ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Coordination:
    """How a worker shares its study through the database. Defaults: a worker is declared dead a
    minute after its last heartbeat; a trial is run again at most `max_retry` times; a database
    away for up to 5 minutes is waited for."""

    heartbeat_interval_s: int = 10
    grace_period_s: int = 60
    max_retry: int | None = 3
    poll_s: float = 5.0  # how often a worker with nothing to ask looks at the others' trials again
    slot: str | None = None  # this worker's devices, as shown ("cpu 0", "gpu 2,3"); None: the machine
    db_outage_s: float = DEFAULT_BOUND_S  # how long the database may be away before the study stops


@dataclass(frozen=True)
class WorkerId:
    """One worker process (`token`: one study loop in it). `started` tells a reused pid apart."""

    host: str
    pid: int
    started: float
    token: str
    slot: str | None = None

    @classmethod
    def this(cls, slot: str | None) -> WorkerId:
        return cls(socket.gethostname(), os.getpid(), psutil.Process().create_time(), uuid.uuid4().hex[:12], slot)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def label(self) -> str:
        return f"{self.host}:{self.pid}" + (f" ({self.slot})" if self.slot else "")


_LIVE_LOOPS: set[str] = set()  # tokens of the study loops running in this process


@contextmanager
def live(worker: WorkerId) -> Iterator[None]:
    """Marks `worker`'s loop as running in this process for the block: a loop that ended (an
    interrupt, in a process that goes on) leaves its trial to the next one at once."""
    _LIVE_LOOPS.add(worker.token)
    try:
        yield
    finally:
        _LIVE_LOOPS.discard(worker.token)


def gone_here(worker: dict[str, Any] | None) -> bool:
    """True only when `worker` (a WORKER_ATTR) ran on this host and is certainly gone: its process
    no longer exists (or is another one under a reused pid), or it is this process and its loop
    has ended. A worker on another host is never declared gone here: only its heartbeat can."""
    if not worker or worker.get("host") != socket.gethostname():
        return False
    if worker.get("pid") == os.getpid():
        return worker.get("token") not in _LIVE_LOOPS
    try:
        return abs(psutil.Process(worker["pid"]).create_time() - worker.get("started", 0.0)) > 1.0
    except (psutil.NoSuchProcess, KeyError, TypeError):
        return True
    except psutil.Error:
        return False


class LocalStorage(InMemoryStorage):
    """Optuna's trials in this process's memory, for a study that no other worker joins and no
    later run resumes (a replayed study: `search.replay`, `make bench-search`): RDB storage's round
    trips are most of a replayed trial's time. Its heartbeats are a no-op: the one worker's loop
    is live while its trial runs, so no trial is ever stale."""

    def record_heartbeat(self, trial_id: int) -> None:
        pass

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        return []

    def get_heartbeat_stale_trial_callback(self) -> None:
        return None


# Where a study keeps Optuna's trials: the database at its URL (`storage`), or this process's memory.
StudyStorage = RDBStorage | LocalStorage


def storage(url: str, coordination: Coordination, engine_kwargs: dict[str, Any]) -> RDBStorage:
    """Optuna's RDB storage with heartbeats on, and a retry callback that queues a dead worker's
    trial again with the same params (and user attrs: a baseline stays a baseline)."""
    with warnings.catch_warnings():  # heartbeat_interval is "experimental" since 2.9
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return RDBStorage(
            url,
            engine_kwargs=engine_kwargs,
            heartbeat_interval=coordination.heartbeat_interval_s,
            grace_period=coordination.grace_period_s,
            heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=coordination.max_retry),
        )


def ask(study: optuna.Study) -> optuna.Trial:
    with warnings.catch_warnings():  # "supposed to be used with Study.optimize": we beat ourselves
        warnings.filterwarnings("ignore", message="Heartbeat of storage")
        return study.ask()


@dataclass(frozen=True)
class Claimed:
    """A trial this worker runs, and who runs it where beside which other trials, as its row keeps it."""

    trial: optuna.Trial
    placement: Placement


def claim(study: optuna.Study, store: StudyStorage, worker: WorkerId, watch: DatabaseWatch) -> Claimed:
    """The next trial, marked as `worker`'s: heartbeat first (a trial with none is never found
    stale), then who runs it (and which trial it runs again), and what the other workers run
    beside it. Each step is ridden out on its own: asking again would leave the asked trial behind."""
    trial = watch.ride(lambda: ask(study))
    beside = watch.ride(lambda: _mark(study, store, worker, trial))
    return Claimed(trial, {"host": worker.host, "pid": worker.pid, "slot": worker.slot, "neighbours": beside})


def _mark(study: optuna.Study, store: StudyStorage, worker: WorkerId, trial: optuna.Trial) -> list[Neighbour]:
    store.record_heartbeat(trial._trial_id)
    mark_claimed(trial, worker.as_dict(), retried_number(store, trial))
    return neighbours(study, worker)


class Heartbeat:
    """Records `trial`'s heartbeat now and every `interval_s` until the block ends. A write
    that fails (the database briefly away) is tried again at the next beat: only a silence
    longer than the grace period lets another worker take the trial. What the beats find of
    the database goes to `watch`: it is often the first to know the database went or came back."""

    def __init__(self, store: StudyStorage, trial: optuna.Trial, interval_s: float, watch: DatabaseWatch) -> None:
        # RDBStorage keys heartbeats by the trial's storage id, which Optuna keeps private.
        self.store, self.trial_id, self.interval_s, self.watch = store, trial._trial_id, interval_s, watch
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{self.trial_id}", daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.store.record_heartbeat(self.trial_id)
            except Exception as e:
                if (reason := connection_lost(e)) is not None:
                    self.watch.lost(reason)
            else:
                self.watch.reachable()

    def __enter__(self) -> Heartbeat:
        # before anything: a trial with none is never stale
        self.watch.ride(lambda: self.store.record_heartbeat(self.trial_id))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass(frozen=True)
class Dead:
    trial: FrozenTrial
    why: str


def dead_trials(
    study: optuna.Study, store: StudyStorage, coordination: Coordination, watch: DatabaseWatch | None = None
) -> list[Dead]:
    """RUNNING trials whose worker is certainly gone (see the module's docstring). A trial with no
    worker recorded (asked by an older version, or killed between ask and its first heartbeat)
    counts as gone once it has run longer than the grace period with no heartbeat. Neither test
    by time is made while `watch` says heartbeats tell nothing (the database was just away)."""
    timed = watch is None or watch.heartbeats_tell(coordination.grace_period_s)
    # Optuna's own staleness test (heartbeat older than grace_period by the database's clock);
    # RDBStorage has no public name for it: fail_stale_trials, its one caller, fails them outright.
    stale = set(store._get_stale_trial_ids(study._study_id)) if timed else set()
    grace = timedelta(seconds=coordination.grace_period_s)
    found = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = t.user_attrs.get(WORKER_ATTR)
        if t._trial_id in stale:
            found.append(Dead(t, f"no heartbeat from {_label(worker)} for over {coordination.grace_period_s} s"))
        elif gone_here(worker):
            found.append(Dead(t, f"its worker {_label(worker)} is gone"))
        elif timed and worker is None and t.datetime_start and datetime.now() - t.datetime_start > grace:
            found.append(Dead(t, f"no worker recorded and running for over {coordination.grace_period_s} s"))
    return found


def _label(worker: dict[str, Any] | None) -> str:
    if not worker:
        return "an unknown worker"
    return f"{worker.get('host')}:{worker.get('pid')}" + (f" ({worker['slot']})" if worker.get("slot") else "")


def requeue(study: optuna.Study, store: StudyStorage, trial: FrozenTrial) -> int | None:
    """Fail a dead worker's trial and queue it again through the storage's retry callback; of
    several workers doing this at once, one wins. Returns the failed trial's number if this call
    won and the retry was queued, None if another worker got there first, retries ran out, or the
    storage queues none (`LocalStorage`: its trial stays failed)."""
    try:
        if not store.set_trial_state_values(trial._trial_id, state=TrialState.FAIL):
            return None
    except optuna.exceptions.UpdateFinishedTrialError:
        return None
    retry = store.get_heartbeat_stale_trial_callback()
    if not isinstance(retry, RetryHeartbeatStaleTrialCallback):
        return None
    failed = store.get_trial(trial._trial_id)
    retry(study, failed)
    retries = len(failed.system_attrs.get("retry_history", [])) + 1  # as the callback counts them
    limit = retry._max_retry  # the callback's own limit; Optuna keeps it private
    return trial.number if limit is None or retries <= limit else None


def retried_number(store: StudyStorage, trial: optuna.Trial) -> int | None:
    """The trial this one runs again (queued by `requeue`), or None."""
    with warnings.catch_warnings():  # retried_trial_number is "experimental" since 2.8
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return RetryHeartbeatStaleTrialCallback.retried_trial_number(store.get_trial(trial._trial_id))


def neighbours(study: optuna.Study, me: WorkerId) -> list[Neighbour]:
    """What the other workers are running now: trial number, worker and slot."""
    found: list[Neighbour] = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        w = t.user_attrs.get(WORKER_ATTR)
        if w and w.get("token") != me.token:
            found.append({"trial": t.number, "worker": _label({**w, "slot": None}), "slot": w.get("slot")})
    return found
