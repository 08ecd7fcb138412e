"""A zygote's process as the tuner sees it: spawned in a session of its own, what the liveness
check reads of it (its state, its CPU time), its whole group killed; and the zygotes a tuner that
was killed left behind, found by their command line and killed (`kill_orphans`).
`ZygoteProcess` is all the zygote's client (`serving.process.zygote`) asks of its process, so that
a unit test plays one without starting it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import psutil

ENTRY_DIR = Path(__file__).resolve().parent / "entry"
MARKER = "autotune_vllm_zygote"  # the zygote's entry module: named in every zygote's command line
ZYGOTE_ENTRY = f"import sys; sys.path.insert(0, {str(ENTRY_DIR)!r}); import {MARKER} as z; z.main(sys.argv[1:])"
# psutil's words for a process that runs nothing until it is continued (SIGSTOP, SIGTSTP, a
# tracer), and for one that has exited (a zombie: exited, not yet reaped by its parent).
STOPPED = frozenset({psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP})
EXITED = frozenset({psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD})


class ZygoteProcess(Protocol):
    """A zygote's process: `subprocess.Popen`'s pid, poll and wait, with psutil's word for its
    state (STATUS_DEAD once it is gone), its CPU seconds and a kill of its whole group."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def status(self) -> str: ...

    def cpu_seconds(self) -> float: ...

    def kill_group(self) -> None: ...


class SpawnedZygote:
    """A zygote the tuner spawned: its own child, leading its own process group."""

    def __init__(self, popen: subprocess.Popen):
        self.popen = popen
        try:
            self._ps: psutil.Process | None = psutil.Process(popen.pid)
        except psutil.NoSuchProcess:
            self._ps = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.popen.wait(timeout=timeout)

    def status(self) -> str:
        if self._ps is None or self.popen.returncode is not None:
            return psutil.STATUS_DEAD
        try:
            return self._ps.status()
        except psutil.NoSuchProcess:
            return psutil.STATUS_DEAD

    def cpu_seconds(self) -> float:
        """User and system seconds of the zygote and of its live descendants: on a GPU it imports
        its worker's modules in a forked probe while it waits for it. The children it has reaped
        are left out: their seconds would come in one jump, after the wait."""
        if self._ps is None:
            return 0.0
        try:
            processes = [self._ps, *self._ps.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0.0
        total = 0.0
        for p in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                times = p.cpu_times()
                total += times.user + times.system
        return total

    def kill_group(self) -> None:
        """SIGKILL to its whole group (the kernel delivers it to a stopped process too, where a TERM
        stays pending), then reaped. Only while it is not reaped yet: until then its pid, the
        group's id, cannot be another process's."""
        if self.popen.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()


def spawn(python: str, env: dict[str, str], args: list[str], ctl_fd: int, log_path: Path) -> SpawnedZygote:
    """`python` running the zygote's entry with `args` after PHASE CTL_FD TUNER_PID (see
    `entry/autotune_vllm_zygote.py`, `main`), `ctl_fd` passed, its output appended to `log_path`.
    Raises OSError (no such python, not executable, no room for the log)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    killed = kill_orphans(psutil.process_iter(["pid", "cmdline", "create_time"]))
    with open(log_path, "ab") as log:
        if killed:
            log.write(f"autotune: killed zygotes whose tuner is gone: {', '.join(map(str, killed))}\n".encode())
        popen = subprocess.Popen(
            [python, "-c", ZYGOTE_ENTRY, "boot", str(ctl_fd), str(os.getpid()), *args],
            env=env,
            pass_fds=(ctl_fd,),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return SpawnedZygote(popen)


def kill_orphans(processes: Iterable[psutil.Process]) -> list[int]:
    """Kill (with their groups) the zygotes among `processes` whose tuner is gone; their pids.

    A zygote exits by itself once its tuner is gone (its socket reads EOF, its parent changes),
    but only while it runs: one stopped when its tuner was SIGKILLed stays, holding an
    interpreter with torch and vLLM imported, until something continues or kills it, and no
    tuner would ever read its socket again. Each zygote's command line names the tuner that
    started it; a tuner that is no longer running, or whose pid now belongs to a process started
    after the zygote, is gone. A zygote of another user's is left (not ours to kill)."""
    killed = []
    for p in processes:
        try:
            tuner = tuner_of(p.info["cmdline"] or [])
            if tuner is None or _running_since(tuner, p.info["create_time"]):
                continue
            os.killpg(p.pid, signal.SIGKILL)  # the zygote leads its group: its probe children too
            killed.append(p.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return killed


def tuner_of(cmdline: list[str]) -> int | None:
    """The pid of the tuner that started the zygote with this command line; None for any other
    process (a zygote started before its command line named its tuner included)."""
    if len(cmdline) < 6 or cmdline[1] != "-c" or f"import {MARKER} as z" not in cmdline[2]:
        return None
    try:
        return int(cmdline[5])
    except ValueError:
        return None


def _running_since(pid: int, before: float) -> bool:
    """`pid` is a running process started no later than `before` (its create time)."""
    try:
        p = psutil.Process(pid)
        return p.create_time() <= before and p.status() not in EXITED
    except psutil.NoSuchProcess:
        return False
