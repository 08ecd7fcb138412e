"""The tuner's side of the study's zygote (`entry/autotune_vllm_zygote.py` says what it is): one
zygote as the tuner talks to it over its control socket (`Zygote`: a ping, then a fork request;
the exits of the guards it forked), the servers it forks (`ForkedServer`), why it did not fork one
(the `ZygoteError`s) and its start (`start_zygote`).

A server the zygote cannot fork (it failed to start or to import vLLM, or died) is exec'd as
before; the server's log says why and where the zygote's own log is. The zygote is watched like a
server: one that does not answer, or stops making progress while it imports, is killed with its
process group and replaced by a new one. Which zygote a server is asked for (one per Python and
environment, started at the first server that asks for it, reused by every later one, closed when
the tuner exits), and the failures after which every later server is exec'd, are
`serving.process.zygote_pool`.

Its process, as the tuner sees it (spawned, watched, its group killed, the orphans of a killed
tuner found and killed), is `serving.process.zygote_process`.

What each liveness bound is for (docs/serving.md, "The study's zygote"):
- a zygote that has answered once sits in its loop, which reads its socket every 0.2 s: a ping
  unanswered for `ping_s` means it is stopped, hung, or swapped out too deep to serve a start;
- it forks a guard at once when asked (the fork of an interpreter with vLLM imported and the
  guard's `setsid`: milliseconds): no answer to a fork request for `fork_s` is the same;
- before its first answer it imports vLLM and reads nothing (tens of seconds on a CPU, minutes on
  a GPU), so it cannot be asked: it makes progress while its CPU time grows. `stall_s` without a
  tick of CPU time (10 ms) is no progress: an import reading a cold disk still ticks."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from serving.process.zygote_process import EXITED, STOPPED, ZygoteProcess, spawn

ABOUT_THE_ZYGOTE = "the study's zygote "  # how each failure's line starts


@dataclass(frozen=True)
class Liveness:
    ping_s: float = 5.0
    fork_s: float = 10.0
    stall_s: float = 15.0  # the stall bound a server under load gets (loadgen.stall), for the same reason
    poll_s: float = 0.25  # how often a waiting start reads the zygote's state (a server start's own poll)


class ImportProgress:
    """The CPU time of a zygote that is importing, and when it last grew."""

    def __init__(self, proc: ZygoteProcess, now: float):
        self.proc, self.cpu_s, self.since = proc, proc.cpu_seconds(), now

    def stalled_for(self, now: float) -> float:
        """Seconds since its CPU time last grew (0 when it grew since the last look)."""
        cpu_s = self.proc.cpu_seconds()
        if cpu_s > self.cpu_s:
            self.cpu_s, self.since = cpu_s, now
        return now - self.since


MAX_MESSAGE = 1 << 20
LIVENESS = Liveness()  # the bounds a zygote is held to (the module's docstring says why each)
UNKNOWN_EXIT = 1  # a guard whose zygote died, or stopped, before it could say how the guard ended
SEND_TIMEOUT_S = 5.0  # a message waits this long for room in the zygote's socket buffer
CLOSE_GRACE_S = 10.0  # a zygote in its loop exits at once when its socket closes
FORKSERVER, FORK = "forkserver", "fork"  # how a server's children start: the CPU build's forkserver, vLLM's fork
# What the zygote imports besides the API server module: what the EngineCore runs (as the CPU
# forkserver preloads it, entry/autotune_vllm_entry.py PRELOAD) and, on a GPU, the worker the
# EngineCore builds, imported only where a forked probe finds that it creates no CUDA context.
ENGINE_MODULES = ["torch", "vllm.v1.engine.core", "vllm.v1.executor.multiproc_executor"]
GPU_WORKER_MODULES = ["vllm.v1.worker.gpu_worker"]


def preload(mode: str) -> list[list[str]]:
    """[modules the zygote imports, modules it imports if a probe finds no CUDA context in them]."""
    return [list(ENGINE_MODULES), list(GPU_WORKER_MODULES) if mode == FORK else []]


class ZygoteError(RuntimeError):
    """Why the zygote did not fork a server, with the zygote failures this start got past
    before (`failures`: a new zygote was started after each)."""

    def __init__(self, why: str, failures: list[str] | None = None):
        super().__init__(why)
        self.failures = list(failures or [])


class ZygoteGone(ZygoteError):
    """The zygote cannot fork a server (it never came up, it has died, or the study gave up on
    its zygote): exec the server."""


class ZygoteTimeout(ZygoteError):
    """The zygote, still importing vLLM and making progress, did not answer within the server's
    start timeout: the start failed, and the zygote's import goes on for the next one."""


class ZygoteFailed(ZygoteError):
    """The zygote is alive but not serving: stopped, hung, or silent past its bound
    (`Liveness`). Kill it; start a new one or exec the server."""


class ForkedServer:
    """`subprocess.Popen`'s interface (pid, poll, wait, returncode) for a server group's guard
    forked by the zygote: not the tuner's child, so its exit code comes from the zygote."""

    def __init__(self, zygote: Zygote, pid: int):
        self.zygote, self.pid = zygote, pid
        self.returncode: int | None = None
        self.note: str | None = None  # why this server needed a new zygote, for its log
        self.zygote_failures: list[str] = []  # the zygote failures its start got past

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired(f"guard {self.pid}", timeout or 0.0)
            time.sleep(0.05)
        return code


class Zygote:
    """One zygote: its process and the tuner's end of its control socket, both given (`start_zygote`
    spawns the real one; a test plays one on a socketpair)."""

    def __init__(
        self,
        key: tuple,
        log_path: Path,
        sock: socket.socket,
        proc: ZygoteProcess,
        liveness: Liveness = LIVENESS,
    ):
        self.key, self.log_path, self.proc, self.liveness = key, log_path, proc, liveness
        self._sock = sock
        self._lock = threading.Lock()
        self._exits: dict[int, int] = {}
        self._forked: dict[int, int | None] = {}  # request id -> guard pid (None: not forked)
        self._requests = 0
        self._pings = 0
        self._ponged = 0  # the last ping answered
        self.answered = False  # it has sent something: its imports are done, it runs its loop
        self.forks = 0
        self.gone = False

    def fork(
        self, argv: list[str], log_path: Path, pipe_fd: int, nice: int, title: str, timeout_s: float
    ) -> ForkedServer:
        """A server group forked with `argv`, its streams appended to `log_path`, its guard
        watching `pipe_fd`: a ping first, then the request. Waits for the zygote's imports on its
        first call (at most `timeout_s`, watched for progress). Raises ZygoteGone (it has died),
        ZygoteFailed (stopped, or silent past a bound) or ZygoteTimeout."""
        with self._lock:
            if self.gone:
                raise ZygoteGone(self._why())
            deadline = time.monotonic() + timeout_s
            self._pings += 1
            ping = self._pings
            self._send({"ping": ping})
            # Importing, it reads nothing: watched for progress instead of bounded.
            bound = self.liveness.ping_s if self.answered else None
            self._await(lambda: self._ponged >= ping, deadline, bound, "a ping")
            self._requests += 1
            request_id = self._requests
            request = {
                "id": request_id,
                "argv": argv,
                "log": str(log_path),
                "cwd": os.getcwd(),
                "nice": nice,
                "title": title,
            }
            self._send(request, pipe_fd)
            self._await(lambda: request_id in self._forked, deadline, self.liveness.fork_s, "a fork request")
            pid = self._forked.pop(request_id)
            if pid is None:
                raise ZygoteGone(f"the study's zygote did not fork it ({self._why()})")
            self.forks += 1
            return ForkedServer(self, pid)

    def exit_code(self, pid: int) -> int | None:
        with self._lock:
            while not self.gone and self._read(0.0):
                pass
            if pid in self._exits:
                return self._exits.pop(pid)
            # A guard that has exited is reaped by the zygote's loop within 0.2 s, and said: one
            # a stopped zygote cannot reap would otherwise look alive until the tuner's timeout.
            if not _alive(pid) and (self.gone or self.proc.status() in STOPPED):
                return UNKNOWN_EXIT
            return None

    def _send(self, message: dict, fd: int | None = None) -> None:
        data = json.dumps(message).encode()
        try:
            self._sock.settimeout(SEND_TIMEOUT_S)
            if fd is None:
                self._sock.send(data)
            else:
                socket.send_fds(self._sock, [data], [fd])
        except TimeoutError:  # its socket's buffer is full: it reads nothing
            raise ZygoteFailed(self._failed(f"did not take a message for {SEND_TIMEOUT_S:.0f} s")) from None
        except OSError:
            self._mark_gone()
            raise ZygoteGone(self._why()) from None

    def _await(self, done: Callable[[], bool], deadline: float, bound_s: float | None, what: str) -> None:
        """Read the zygote's messages until `done()`. Bounded by `bound_s` once it has answered;
        before that (None) it imports vLLM, as long as it is not stopped and its CPU time grows,
        up to `deadline`."""
        t0 = time.monotonic()
        progress = None if bound_s is not None else ImportProgress(self.proc, t0)
        while not done():
            if self._read(self.liveness.poll_s):
                continue
            if self.gone:
                raise ZygoteGone(self._why())
            state, now = self.proc.status(), time.monotonic()
            if state in EXITED:  # its socket's EOF is held by a child of its (the GPU probe)
                self._mark_gone()
                raise ZygoteGone(self._why())
            doing = "while importing vLLM" if progress is not None else f"before answering {what}"
            if state in STOPPED:
                raise ZygoteFailed(self._failed(f"is stopped ({state}) {doing}"))
            if bound_s is not None and now - t0 > bound_s:
                raise ZygoteFailed(self._failed(f"did not answer {what} within {bound_s:g} s"))
            if progress is not None and progress.stalled_for(now) > self.liveness.stall_s:
                raise ZygoteFailed(self._failed(f"used no CPU for {self.liveness.stall_s:g} s {doing}"))
            if now >= deadline:
                waited = "is still importing vLLM" if progress is not None else f"has not answered {what} yet"
                raise ZygoteTimeout(f"{ABOUT_THE_ZYGOTE}{waited} (its log: {self.log_path})")

    def _read(self, timeout_s: float) -> bool:
        """One message, if one comes within `timeout_s`; False on none, or on EOF (then `gone`)."""
        self._sock.settimeout(timeout_s)
        try:
            data = self._sock.recv(MAX_MESSAGE)
        except (TimeoutError, BlockingIOError):
            return False
        except OSError:
            data = b""
        if not data:
            self._mark_gone()
            return False
        self.answered = True
        message = json.loads(data)
        if "pong" in message:
            self._ponged = max(self._ponged, message["pong"])
        elif "forked" in message:
            self._forked[message["id"]] = message["forked"]
        else:
            self._exits[message["exited"]] = message["code"]
        return True

    def _mark_gone(self) -> None:
        self.gone = True
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)

    def _why(self) -> str:
        code = self.proc.poll()
        state = "still running" if code is None else f"exit code {code}"
        last = _last_line(self.log_path)
        return f"the study's zygote is gone ({state}{': ' + last if last else ''}; its log: {self.log_path})"

    def _failed(self, what: str) -> str:
        return f"{ABOUT_THE_ZYGOTE}(pid {self.proc.pid}) {what}"

    def kill(self) -> None:
        """Given up on: its group killed at once (a stopped one included), and any server it
        forked for a request the tuner gave up waiting on (its answer may have come meanwhile)."""
        with self._lock:
            self.gone = True
            self.proc.kill_group()
            with contextlib.suppress(OSError):
                while self._read(0.0):
                    pass
            self._sock.close()
            for pid in self._forked.values():
                if pid is not None:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pid, signal.SIGKILL)

    def close(self) -> None:
        """Done with it: closing the socket ends one in its loop (servers it forked run on, each
        under its own guard, until they are stopped). One that cannot read it, stopped or still
        importing, or that does not exit within CLOSE_GRACE_S, has its group killed."""
        self.gone = True
        self._sock.close()
        if not self.answered or self.proc.status() in STOPPED:
            self.proc.kill_group()
            return
        try:
            self.proc.wait(timeout=CLOSE_GRACE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill_group()


def start_zygote(python: str, env: dict[str, str], api_module: str, log_path: Path, mode: str) -> Zygote:
    """A zygote for (`python`, `env`, `mode`), spawned and importing; raises ZygoteGone when it
    cannot be spawned."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        proc = spawn(python, env, [api_module, mode, json.dumps(preload(mode))], theirs.fileno(), log_path)
    except OSError as e:  # no such python, not executable, no room for the log
        ours.close()
        raise ZygoteGone(f"the study's zygote did not start ({type(e).__name__}: {e})") from None
    finally:
        theirs.close()
    return Zygote(zygote_key(python, env, mode), log_path, ours, proc)


def zygote_key(python: str, env: dict[str, str], mode: str = FORKSERVER) -> tuple:
    return python, tuple(sorted(env.items())), mode


def _last_line(path: Path) -> str:
    """The zygote log's last line (why it refused or failed), cut short."""
    try:
        lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() not in EXITED
    except psutil.NoSuchProcess:
        return False
