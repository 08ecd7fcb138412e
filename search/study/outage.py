"""A database that is away for a while (a restart, a failover, a pod moved), ridden out.

The study's reads and writes go through `DatabaseWatch.ride`: an error that says the
connection is lost or refused (`storage.connection.connection_lost`) is retried with backoff
until the database answers again, or until it has been away `bound_s` (`--db-outage-s`):
then `DatabaseUnreachable`, one line and exit code 1, and the same command resumes. Any other
error goes through at once.

One watch per study loop, shared with its heartbeat thread: whoever notices first, the
database going away is said once and its return once. While it is away, and for a grace
period after it came back, the other workers' heartbeats tell nothing (`heartbeats_tell`): a
heartbeat missed then is the database's silence, not its worker's, and a worker that was
waiting like this one writes its next one within the grace period.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from search.study.errors import DatabaseUnreachable
from storage.connection import connection_lost

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
