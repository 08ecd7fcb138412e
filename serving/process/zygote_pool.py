"""The study's zygote as this tuner process keeps it: one at a time (one per Python, environment
and mode; a zygote for another environment replaces it), started at the first server that asks for
it, reused by every later one, closed when the tuner exits (`close`). A zygote that fails is killed
and a new one asked within the same start (`fork_server`); after `GIVE_UP_AFTER` such failures in
one tuner process every later server is exec'd (`status`).

Its own room, apart from one zygote's client (`serving.process.zygote`), because it holds the
process-wide state: the current zygote, the environments refused one, the failures so far."""

from __future__ import annotations

import atexit
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from serving.process.zygote import (
    ABOUT_THE_ZYGOTE,
    FORKSERVER,
    ForkedServer,
    Zygote,
    ZygoteFailed,
    ZygoteGone,
    ZygoteTimeout,
    start_zygote,
    zygote_key,
)

GIVE_UP_AFTER = 2  # zygote failures in one tuner process, after which its servers are exec'd


@dataclass(frozen=True)
class ZygoteFailure:
    at: datetime  # local wall time, the clock of the servers' logs
    line: str


@dataclass(frozen=True)
class ZygoteStatus:
    """The zygote failures of this tuner process, in order: what a study's summary says of them."""

    failures: tuple[ZygoteFailure, ...] = ()

    @property
    def exec_only(self) -> bool:
        """No new zygote is started: every later server is exec'd."""
        return len(self.failures) >= GIVE_UP_AFTER

    @property
    def times(self) -> str:
        return {1: "once", 2: "twice"}.get(len(self.failures), f"{len(self.failures)} times")

    @property
    def said(self) -> str:
        """Each failure with its time: "10:02:03 (pid 812) did not answer a ping within 5 s; ..."."""
        return "; ".join(f"{f.at:%H:%M:%S} {f.line.removeprefix(ABOUT_THE_ZYGOTE)}" for f in self.failures)

    def summary(self) -> str | None:
        """One line for the study's summary; None when the zygote never failed."""
        if not self.failures:
            return None
        then = "later servers were exec'd" if self.exec_only else "a new one took its place"
        return f"the study's zygote failed {self.times} ({self.said}); {then}"


_current: Zygote | None = None
_failed: set[tuple] = set()  # keys whose zygote never forked a server: exec'd from then on
_failures: list[ZygoteFailure] = []  # the zygotes killed for not serving, in order
_pool_lock = threading.Lock()


@dataclass(frozen=True)
class ServerFork:
    """One server as the zygote is asked for it: which zygote forks it (one per `python`, `env`
    and `mode`; `api_module` is the server's entry point it imports), and the server's command
    line, log, the pipe its guard watches, its niceness and its process title."""

    python: str
    env: dict[str, str]
    api_module: str
    argv: list[str]
    log_path: Path
    pipe_fd: int
    nice: int
    title: str
    mode: str = FORKSERVER


def fork_server(server: ServerFork, timeout_s: float) -> ForkedServer:
    """`server` forked by the zygote for its (`python`, `env`, `mode`), started here if need be
    (one at a time: a zygote for another environment replaces it). A zygote that fails (ZygoteFailed)
    is killed and a new one asked, within the same `timeout_s`. Raises ZygoteGone (exec it
    instead) or ZygoteTimeout; either says which zygote failures it got past (`failures`)."""
    global _current
    key = zygote_key(server.python, server.env, server.mode)
    deadline = time.monotonic() + timeout_s
    recovered: list[str] = []  # the zygotes killed during this start
    with _pool_lock:
        while True:
            if refused := _refusal(key):  # the refusal of a study that gave up names every failure
                raise ZygoteGone(refused if status().exec_only else _after(recovered, refused), recovered)
            note = f"a new zygote: {recovered[-1]} (killed)" if recovered else _fit(key)
            try:
                zygote = _current = _current or start_zygote(
                    server.python, server.env, server.api_module, zygote_log(server.log_path), server.mode
                )
            except ZygoteGone as e:
                _failed.add(key)
                raise ZygoteGone(_after(recovered, str(e)), recovered) from e
            try:
                left_s = max(0.0, deadline - time.monotonic())
                forked = zygote.fork(server.argv, server.log_path, server.pipe_fd, server.nice, server.title, left_s)
            except ZygoteFailed as e:
                _give_up_on(zygote, str(e))
                recovered.append(str(e))
                continue
            except ZygoteGone as e:
                if zygote.forks == 0:
                    _failed.add(key)
                zygote.close()
                _current = None
                raise ZygoteGone(_after(recovered, str(e)), recovered) from e
            except ZygoteTimeout as e:
                raise ZygoteTimeout(_after(recovered, str(e)), recovered) from e
            forked.note, forked.zygote_failures = note, recovered
            return forked


def _after(recovered: list[str], why: str) -> str:
    """`why`, after the zygote failures this start got past (each one's zygote killed)."""
    return "; then ".join([*(f"{line} (killed)" for line in recovered), why])


def _refusal(key: tuple) -> str | None:
    """Why no zygote is asked for this server, if none is."""
    if key in _failed:
        return "no zygote for this Python and environment: the last one never forked a server"
    if (now := status()).exec_only:
        return f"the study's zygote failed {now.times} ({now.said}): no new zygote for the rest of the study"
    return None


def _fit(key: tuple) -> str | None:
    """The current zygote closed if it cannot fork this server; why, if it was."""
    global _current
    if _current is None or (_current.key == key and not _current.gone):
        return None
    note = f"a new zygote: {_replaced_because(_current, key)}"
    _current.close()
    _current = None
    return note


def _give_up_on(zygote: Zygote, line: str) -> None:
    global _current
    zygote.kill()
    _failures.append(ZygoteFailure(datetime.now(), line))
    if _current is zygote:
        _current = None


def status() -> ZygoteStatus:
    """The zygote failures of this tuner process so far, and whether its servers are now exec'd."""
    return ZygoteStatus(tuple(_failures))


def current_pid() -> int | None:
    """The pid of the zygote the next server would be asked for (None: none started yet, or the
    last one was closed or given up on). It leads its process group. For a caller that watches
    it from outside, such as a test that stops or kills it."""
    current = _current
    return None if current is None else current.proc.pid


def forget_failures() -> None:
    """For tests only: this process's zygote failures forgotten (`status`, and the environments
    refused a zygote), as at a tuner's start; the current zygote is kept. A test that fails
    zygotes on purpose calls it, so that the tests after it in the same process get zygotes
    again: a tuner never does (its record lasts its process)."""
    with _pool_lock:
        _failures.clear()
        _failed.clear()


def zygote_log(server_log: Path) -> Path:
    """Where a zygote logs: beside the log of the server that started it (a study's calibration or
    first trial), inside the directory its caller chose; never above it, where a server logging to
    `test-artifacts/x.log` would put it in the working directory. Each forked server's log names it."""
    return server_log.parent / "zygote.log"


def _replaced_because(old: Zygote, key: tuple) -> str:
    """Why a server cannot use the last zygote: names only (an environment's values may be secrets)."""
    if old.gone:
        return old._why()
    if old.key[0] != key[0]:
        return f"another Python ({key[0]})"
    if old.key[2:] != key[2:]:
        return f"another way to start a server's children ({key[2]})"
    before, now = dict(old.key[1]), dict(key[1])
    changed = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
    return f"the environment differs from the last one's in {', '.join(changed)}"


def close() -> None:
    global _current
    with _pool_lock:
        if _current is not None:
            _current.close()
            _current = None


atexit.register(close)
