"""The tuner's side of the study's zygote (`entry/autotune_vllm_zygote.py` says what it is): one
per Python and environment, started at the first server that asks for it, reused by every later
one, closed when the tuner exits (and exiting by itself if the tuner dies).

A server the zygote cannot fork (it failed to start or to import vLLM, or died) is exec'd as
before; the server's log says why and where the zygote's own log is.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import psutil

ENTRY_DIR = Path(__file__).resolve().parent / "entry"
ZYGOTE_ENTRY = (
    f"import sys; sys.path.insert(0, {str(ENTRY_DIR)!r}); import autotune_vllm_zygote as z; z.main(sys.argv[1:])"
)
MAX_MESSAGE = 1 << 20
UNKNOWN_EXIT = 1  # a guard whose zygote died before it could say how the guard ended
FORKSERVER, FORK = "forkserver", "fork"  # how a server's children start: the CPU build's forkserver, vLLM's fork
# What the zygote imports besides the API server module: what the EngineCore runs (as the CPU
# forkserver preloads it, entry/autotune_vllm_entry.py PRELOAD) and, on a GPU, the worker the
# EngineCore builds, imported only where a forked probe finds that it creates no CUDA context.
ENGINE_MODULES = ["torch", "vllm.v1.engine.core", "vllm.v1.executor.multiproc_executor"]
GPU_WORKER_MODULES = ["vllm.v1.worker.gpu_worker"]


def preload(mode: str) -> list[list[str]]:
    """[modules the zygote imports, modules it imports if a probe finds no CUDA context in them]."""
    return [list(ENGINE_MODULES), list(GPU_WORKER_MODULES) if mode == FORK else []]


class ZygoteGone(RuntimeError):
    """The zygote cannot fork a server (it never came up, or it has died): exec the server."""


class ZygoteTimeout(RuntimeError):
    """The zygote did not fork within the server's start timeout (still importing vLLM): the
    start timed out. A request it reads later finds the tuner's pipe closed and forks nothing."""


class ForkedServer:
    """`subprocess.Popen`'s interface (pid, poll, wait, returncode) for a server group's guard
    forked by the zygote: not the tuner's child, so its exit code comes from the zygote."""

    def __init__(self, zygote: Zygote, pid: int):
        self.zygote, self.pid, self.returncode = zygote, pid, None
        self.note: str | None = None  # why this server needed a new zygote, for its log

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired(f"guard {self.pid}", timeout)
            time.sleep(0.05)
        return self.returncode


class Zygote:
    def __init__(self, python: str, env: dict[str, str], api_module: str, log_path: Path, mode: str = FORKSERVER):
        self.key = zygote_key(python, env, mode)
        self.log_path = log_path
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._lock = threading.Lock()
        self._exits: dict[int, int] = {}
        self._forked: dict[int, int | None] = {}  # request id -> guard pid (None: not forked)
        self._requests = 0
        self.forks = 0
        self.gone = False
        self.proc: subprocess.Popen | None = None
        self._start_error: str | None = None
        try:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [
                        python,
                        "-c",
                        ZYGOTE_ENTRY,
                        "boot",
                        str(theirs.fileno()),
                        api_module,
                        mode,
                        json.dumps(preload(mode)),
                    ],
                    env=env,
                    pass_fds=(theirs.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except OSError as e:  # no such python, not executable, no room for the log
            self.gone, self._start_error = True, f"{type(e).__name__}: {e}"
        finally:
            theirs.close()

    def fork(
        self, argv: list[str], log_path: Path, pipe_fd: int, nice: int, title: str, timeout_s: float
    ) -> ForkedServer:
        """A server group forked with `argv`, its streams appended to `log_path`, its guard
        watching `pipe_fd`. Waits for the zygote's imports on its first call (at most
        `timeout_s`); raises ZygoteGone when it cannot."""
        with self._lock:
            self._requests += 1
            request = {
                "id": self._requests,
                "argv": argv,
                "log": str(log_path),
                "cwd": os.getcwd(),
                "nice": nice,
                "title": title,
            }
            if self.gone:
                raise ZygoteGone(self._why())
            try:
                self._sock.settimeout(5.0)
                socket.send_fds(self._sock, [json.dumps(request).encode()], [pipe_fd])
            except OSError:
                self._mark_gone()
                raise ZygoteGone(self._why()) from None
            end = time.monotonic() + timeout_s
            while request["id"] not in self._forked:
                if not self._read(max(0.0, end - time.monotonic())):
                    if self.gone:
                        raise ZygoteGone(self._why())
                    if time.monotonic() >= end:
                        raise ZygoteTimeout(f"the study's zygote has not forked it yet (its log: {self.log_path})")
            pid = self._forked.pop(request["id"])
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
            if self.gone and not _alive(pid):
                return UNKNOWN_EXIT
            return None

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
        message = json.loads(data)
        if "forked" in message:
            self._forked[message["id"]] = message["forked"]
        else:
            self._exits[message["exited"]] = message["code"]
        return True

    def _mark_gone(self) -> None:
        self.gone = True
        try:
            if self.proc is not None:
                self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def _why(self) -> str:
        if self.proc is None:
            return f"the study's zygote did not start ({self._start_error})"
        code = self.proc.poll()
        state = "still running" if code is None else f"exit code {code}"
        last = _last_line(self.log_path)
        return f"the study's zygote is gone ({state}{': ' + last if last else ''}; its log: {self.log_path})"

    def close(self) -> None:
        """Done with it: closing the socket ends it (servers it forked run on, each under its own
        guard, until they are stopped)."""
        self.gone = True
        self._sock.close()
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


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
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


_current: Zygote | None = None
_failed: set[tuple] = set()  # keys whose zygote never forked a server: exec'd from then on
_pool_lock = threading.Lock()


def fork_server(
    python: str,
    env: dict[str, str],
    api_module: str,
    argv: list[str],
    log_path: Path,
    pipe_fd: int,
    nice: int,
    title: str,
    timeout_s: float,
    mode: str = FORKSERVER,
) -> ForkedServer:
    """A server forked by the zygote for (`python`, `env`, `mode`), started here if need be (one
    at a time: a zygote for another environment replaces it). Raises ZygoteGone (exec it
    instead) or ZygoteTimeout."""
    global _current
    key = zygote_key(python, env, mode)
    with _pool_lock:
        if key in _failed:
            raise ZygoteGone("no zygote for this Python and environment: the last one never forked a server")
        note = None
        if _current is not None and (_current.key != key or _current.gone):
            note = f"a new zygote: {_replaced_because(_current, key)}"
            _current.close()
            _current = None
        if _current is None:
            _current = Zygote(python, env, api_module, zygote_log(log_path), mode)
        zygote = _current
        try:
            forked = zygote.fork(argv, log_path, pipe_fd, nice, title, timeout_s)
            forked.note = note
            return forked
        except ZygoteGone:
            if zygote.forks == 0:
                _failed.add(key)
            zygote.close()
            _current = None
            raise


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
