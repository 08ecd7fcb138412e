"""Starts, watches and stops one vLLM server, and never leaves one behind.

* starts what a `LaunchSpec` describes: forked by the study's zygote, or exec'd under its guard;
* binds 127.0.0.1 on a free port held for it until vLLM binds it (`process_group.reserve_port`,
  with what the tuner reads of the group: its members, their states, the port), in its
  own process group (see `server_guard`), log to a file of its own (a log left by an earlier
  start is kept beside it, see `set_aside`);
* waits for `/health` == 200, noticing an early exit within a poll interval (0.25 s), not at
  the timeout, and classifying it from the log (`serving.failures`);
* is watched under a measurement once it is up (`serving_watch.while_serving`): its death or
  its hang ends the measurement at once with the failure named, as an early exit ends the wait
  for `/health`;
* knows where its start's seconds went (`start_anatomy`: vLLM's log lines against the spawn,
  the health check and, from the first load run's records, the first token served:
  `serving_watch.FirstTokenWatch`), and hands that over with its stop report;
* stops the whole group (TERM, then KILL) and returns only once no process of the group is
  left, the port no longer listens and, on a GPU, the memory is back. A group with a stopped
  process (SIGSTOP: TERM stays pending until it is continued) or one the caller knows is hung
  gets KILL at once, which the kernel delivers to stopped processes too.

How the tuner gets a server for a set of flags (`launch`) is `serving.process.launcher`."""

from __future__ import annotations

import atexit
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

import vllm_http
from serving.failures import (
    SIGKILL_CODES,
    Failure,
    FailureClass,
    FailurePhase,
    classify,
)
from serving.machine import gpu_memory_used_mib, server_cache_env
from serving.process import zygote, zygote_pool
from serving.process.launch_spec import (
    API_MODULE,
    HOST,
    LEAN_ENTRY,
    PLUGIN_ENV,
    WARM_ENTRY,
    LaunchSpec,
    server_nice,
)
from serving.process.process_group import (
    all_stopped,
    group_members,
    group_stopped,
    kernel_oom_kill,
    port_listening,
    reserve_port,
)
from serving.start_anatomy import StartAnatomy, start_anatomy

__all__ = [  # the names the rest of the tuner and its tests take from here
    "API_MODULE",
    "HOST",
    "LEAN_ENTRY",
    "PLUGIN_ENV",
    "WARM_ENTRY",
    "LaunchSpec",
    "ServerFailed",
    "StopReport",
    "VllmServer",
    "server_nice",
    "set_aside",
]

POLL_S = 0.25


# Set by scikit-learn for its own process when it is imported (Optuna's importances import it, after
# a study's first trial): the tuner's, never the server's, unless they were set when it started.
# Passed on, they changed the servers' environment mid-study (and so needed a second zygote).
TUNER_LIBRARY_ENV = frozenset({"KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK"})
_NOT_THE_USERS = TUNER_LIBRARY_ENV - os.environ.keys()  # those unset when the tuner started
# libpq's password and password file: how a worker reaches the study's database (storage.url
# for_child), never a server's business. A server's environment is readable wherever its
# processes are (/proc/PID/environ, a plugin, a crash report), so it carries no credential.
DATABASE_SECRET_ENV = frozenset({"PGPASSWORD", "PGPASSFILE"})


class ServerFailed(RuntimeError):
    def __init__(self, failure: Failure):
        super().__init__(failure.summary())
        self.failure = failure


@dataclass(frozen=True)
class StopReport:
    seconds: float
    killed: bool  # needed SIGKILL after the grace period
    port_freed: bool
    gpu_memory_released: bool | None
    start_anatomy: StartAnatomy | None = None  # of a server that answered /health


def set_aside(log_path: Path) -> Path | None:
    """Move an earlier start's log out of the way (server.log -> server.1.log, the first free
    number), so each start writes and is classified from its own file; where it went."""
    if not log_path.exists():
        return None
    n = 1
    while (kept := log_path.with_name(f"{log_path.stem}.{n}{log_path.suffix}")).exists():
        n += 1
    log_path.rename(kept)
    return kept


_LIVE: set[VllmServer] = set()


def stop_all() -> None:
    for server in list(_LIVE):
        server.stop()


atexit.register(stop_all)


class VllmServer:
    """One server process group. Use as a context manager, or call start()/stop()."""

    def __init__(self, spec: LaunchSpec, *, alone_on_gpu: bool = True):
        self.spec = spec
        # False where other servers share the GPU (a benchmark's side-by-side starts): stop() then
        # does not wait for the GPU's memory to fall back to what it was before this start.
        self.alone_on_gpu = alone_on_gpu
        self.port: int | None = None
        self.proc: subprocess.Popen | zygote.ForkedServer | None = None
        self._pipe_w: int | None = None
        self._log: BinaryIO | None = None
        self.started_at: float | None = None
        self.ready_s: float | None = None
        self.spawned_at: datetime | None = None  # local wall time, the clock of vLLM's log lines
        self._gpu_baseline: list[float] | None = None
        self.pids: set[int] = set()  # every process seen in the group, for the kernel log's word
        # The study's zygote failed during this start and was killed, and a new zygote forked the
        # server or it was exec'd: the lines, for the trial's record (None: no zygote failed).
        self.zygote_failure: str | None = None

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pgid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def __enter__(self) -> VllmServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- start -------------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        for key in _NOT_THE_USERS | DATABASE_SECRET_ENV:
            env.pop(key, None)
        for key, value in server_cache_env().items():
            env.setdefault(key, value)
        env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # the KV size comes from our flags only
        env.pop(PLUGIN_ENV, None)  # on only where this start asks for it
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.spec.tuner_env())
        env.update(self.spec.env)
        return env

    def start(self) -> None:
        """Start and wait until healthy; raises ServerFailed (already stopped) otherwise."""
        if self.spec.gpu:
            self._gpu_baseline = gpu_memory_used_mib()
        reservation = reserve_port()
        self.port = reservation.getsockname()[1]
        self.spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        set_aside(self.spec.log_path)
        self._log = open(self.spec.log_path, "ab")  # append: a forked server writes to it too
        read_fd, self._pipe_w = os.pipe()
        command = self.spec.command(self.port)
        self._log.write(("$ " + " ".join(command) + "\n").encode())
        self._log.flush()
        self.started_at, self.spawned_at = time.monotonic(), datetime.now()
        env = self._env()
        try:
            self.proc = self._fork_from_zygote(env, read_fd) if self.spec.forked_by_zygote else None
            if self.proc is None:
                self.proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "serving.process.entry.server_guard",
                        str(read_fd),
                        "--nice",
                        str(server_nice()),
                        "--",
                        *command,
                    ],
                    stdout=self._log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,
                    pass_fds=(read_fd,),
                )
            _LIVE.add(self)
            self._wait_healthy()
        except ServerFailed:
            self.stop()
            raise
        finally:
            os.close(read_fd)
            reservation.close()
        self.ready_s = time.monotonic() - self.started_at
        self.pids.update(p.pid for p in group_members(self.proc.pid))

    def _fork_from_zygote(self, env: dict[str, str], pipe_fd: int) -> zygote.ForkedServer | None:
        """The server forked by the study's zygote (the same command, without importing vLLM
        again); None, with the reason in the log, where it cannot be. A zygote that fails is
        replaced within this start (`zygote_pool.fork_server`): one line here says so."""
        assert self.port is not None  # `start` reserved it first
        argv, api_module = self.spec.server_argv(self.port), self.spec.api_module
        # Before the fork, so that it comes before the server's own lines.
        self.note("the command above is forked by the study's zygote (vLLM imported once per study)")
        try:
            server = zygote_pool.ServerFork(
                self.spec.python,
                env,
                api_module,
                argv,
                self.spec.log_path,
                pipe_fd,
                server_nice(),
                title=shlex.join(["python", "-m", api_module, *argv]),
                mode=self.spec.children,
            )
            forked = zygote_pool.fork_server(server, timeout_s=self.spec.startup_timeout_s)
        except zygote.ZygoteTimeout as e:
            self.zygote_failure = "; ".join(e.failures) or None
            raise ServerFailed(
                Failure(
                    FailureClass.ZYGOTE,
                    f"not forked after {self.spec.startup_timeout_s:.0f} s: {e}",
                    phase=FailurePhase.STARTUP,
                    elapsed_s=self.elapsed(),
                    log_path=str(self.spec.log_path),
                )
            ) from None
        except zygote.ZygoteGone as e:
            self.zygote_failure = "; ".join(e.failures) or None
            self.note(f"not forked: {e}; this server is exec'd")
            return None
        self.zygote_failure = "; ".join(forked.zygote_failures) or None
        said = f"{forked.note}; " if forked.note else ""
        self.note(f"{said}the zygote's log: {forked.zygote.log_path}")
        return forked

    def _wait_healthy(self) -> None:
        assert self.proc is not None and self.started_at is not None  # `start` set both first
        deadline = self.started_at + self.spec.startup_timeout_s
        while True:
            self.pids.update(p.pid for p in group_members(self.proc.pid))
            failure = self.poll_failure(phase=FailurePhase.STARTUP)
            if failure is not None:
                raise ServerFailed(failure)
            if self.healthy(timeout=2.0):
                return
            if time.monotonic() > deadline:
                lines = [x for x in self.log_text().splitlines() if x.strip()]
                raise ServerFailed(
                    Failure(
                        FailureClass.START_TIMEOUT,
                        f"not healthy after {self.spec.startup_timeout_s:.0f} s; last log line: "
                        f"{lines[-1][:300] if lines else '(empty)'}",
                        phase=FailurePhase.STARTUP,
                        elapsed_s=self.elapsed(),
                        log_path=str(self.spec.log_path),
                    )
                )
            time.sleep(POLL_S)

    def healthy(self, timeout: float = 2.0) -> bool:
        return self.port is not None and vllm_http.healthy(HOST, self.port, timeout)

    def processes_stopped(self) -> bool:
        """Every process of the server is stopped (SIGSTOP, a tracer): it answers nothing until
        continued, which is all a watcher needs to call it hung (`while_serving`)."""
        return self.proc is not None and all_stopped(self.pids | {self.proc.pid})

    def start_anatomy(self) -> StartAnatomy | None:
        """Where this start's seconds went, to /health (None before it answered); the client that
        loads it adds the first token (`StartAnatomy.with_first_token`)."""
        if self.ready_s is None or self.spawned_at is None:
            return None
        return start_anatomy(self.log_text(), self.spawned_at, self.ready_s)

    def elapsed(self) -> float:
        return time.monotonic() - self.started_at if self.started_at else 0.0

    def log_text(self) -> str:
        try:
            return self.spec.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def note(self, line: str) -> None:
        """A line of the tuner's in the server's log (a running server's log is open for appending)."""
        if self._log is not None and not self._log.closed:
            self._log.write(f"autotune: {line}\n".encode())
            self._log.flush()

    def poll_failure(self, phase: FailurePhase) -> Failure | None:
        """If the server has exited, why. Call during load to catch a crash mid-run."""
        if self.proc is None or self.proc.poll() is None:
            return None
        assert self.started_at is not None  # `start` sets it before it starts the process
        rc = self.proc.returncode
        text = self.log_text()
        # Only a silent SIGKILL needs the kernel's word on who killed it.
        silent_kill = rc in SIGKILL_CODES or "EngineDeadError" in text
        # The kernel log's timestamps count from boot, like CLOCK_MONOTONIC (time.monotonic).
        oom_kill = kernel_oom_kill(self.pids, self.started_at - 1.0) if silent_kill else None
        cls, line = classify(text, rc, oom_kill)
        return Failure(
            cls, line, phase=phase, returncode=rc, elapsed_s=self.elapsed(), log_path=str(self.spec.log_path)
        )

    # -- stop --------------------------------------------------------------------------------

    def stop(self, kill: bool = False) -> StopReport | None:
        """Stop the group: TERM and `stop_grace_s` to exit, then KILL; KILL at once when `kill`
        (the caller saw it hang) or when a process of the group is stopped."""
        if self.proc is None:
            self._release()
            return None
        anatomy = self.start_anatomy()  # before the log fills with shutdown lines; not in stop_s
        t0 = time.monotonic()
        pgid, killed = self.proc.pid, False
        grace = 0.0 if kill or group_stopped(group_members(pgid)) else self.spec.stop_grace_s
        if grace:
            try:
                os.killpg(pgid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = t0 + grace
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if group_members(pgid):
            killed = True
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            while group_members(pgid) and time.monotonic() < deadline + 30:
                time.sleep(POLL_S)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        port = self.port
        assert port is not None  # reserved before the process was started
        port_freed = self._wait(lambda: not port_listening(port), 30)
        gpu_released = None
        if self.spec.gpu and self._gpu_baseline is not None and self.alone_on_gpu:
            base = self._gpu_baseline
            gpu_released = self._wait(lambda: all(u <= b + 512 for u, b in zip(gpu_memory_used_mib(), base)), 60)
        self._release()
        self.proc = None
        return StopReport(time.monotonic() - t0, killed, port_freed, gpu_released, anatomy)

    def _release(self) -> None:
        """The tuner's end of the guard's pipe (its EOF stops a guard still running), the log."""
        if self._pipe_w is not None:
            os.close(self._pipe_w)
            self._pipe_w = None
        if self._log:
            self._log.close()
        _LIVE.discard(self)

    @staticmethod
    def _wait(cond, timeout_s: float) -> bool:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if cond():
                return True
            time.sleep(POLL_S)
        return cond()
