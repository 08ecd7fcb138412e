"""The study's zygote watched like a server (serving.process.zygote, serving.process.zygote_pool):
a zygote that does not answer, is stopped, or stops making progress while it imports is killed with
its group and replaced within the same start; after two such failures every later server is exec'd,
and the status says so. The zygote is played by a thread on the other end of a socketpair, its
process by a stand-in: no process starts.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from serving import FailureClass
from serving.process import ServerFailed, VllmServer, zygote_pid, zygote_pool, zygote_process, zygote_status
from serving.process import zygote as zygote_mod
from serving.process.launch_spec import LaunchSpec
from serving.process.zygote import Liveness, ZygoteGone

# Short bounds: each failure is seen in well under a second, where the study's bounds take seconds.
FAST = Liveness(ping_s=0.3, fork_s=0.3, stall_s=0.5, poll_s=0.02)
START_TIMEOUT_S = 300.0  # a server's start timeout: no test may come near it
NO_SUCH_PID = 5_000_000  # above Linux's largest pid (2**22): never a process, never signalled


class StandInProcess:
    """What the tuner reads of a zygote's process; `cpu_step` is added at every look at its CPU time."""

    def __init__(self, state: str = psutil.STATUS_SLEEPING, cpu_step: float = 0.0):
        self.pid, self.state, self.cpu_s, self.cpu_step = NO_SUCH_PID, state, 0.0, cpu_step
        self.code: int | None = None
        self.exited, self.killed = threading.Event(), threading.Event()

    def exit(self, code: int) -> None:
        self.code, self.state = code, psutil.STATUS_DEAD
        self.exited.set()

    def poll(self) -> int | None:
        return self.code

    def wait(self, timeout: float | None = None) -> int:
        if not self.exited.wait(timeout):
            raise subprocess.TimeoutExpired("zygote", timeout or 0.0)
        return self.code or 0

    def status(self) -> str:
        return self.state

    def cpu_seconds(self) -> float:
        self.cpu_s += self.cpu_step
        return self.cpu_s

    def kill_group(self) -> None:
        self.killed.set()
        self.exit(-9)


class PlayedZygote:
    """The zygote's side of the protocol, played by a thread: it reads nothing until `imported` is
    set (it imports vLLM), then answers pings and forks what it is asked; `silent` set, it reads
    and answers nothing; `forks` False, it answers pings and never a fork request; `dies_on_fork`,
    a fork request ends it (its socket closes, its process exits)."""

    def __init__(self, *, imported: bool = True, forks: bool = True, dies_on_fork: bool = False, **process):
        self.tuner_end, self.end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = StandInProcess(**process)
        self.imported, self.silent = threading.Event(), threading.Event()
        if imported:
            self.imported.set()
        self.forks, self.dies_on_fork = forks, dies_on_fork
        self.requests: list[dict] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.proc.exited.is_set():
            if not self.imported.is_set() or self.silent.is_set():
                time.sleep(0.01)
                continue
            if not select.select([self.end], [], [], 0.01)[0]:
                continue
            data, fds, _, _ = socket.recv_fds(self.end, 1 << 20, 1)
            for fd in fds:
                os.close(fd)
            if self.silent.is_set():  # it fell silent while it waited for this message
                continue
            if not data:  # the tuner closed it: exits, as the zygote does
                self.proc.exit(0)
                return
            message = json.loads(data)
            if not fds:
                self.end.send(json.dumps({"pong": message["ping"]}).encode())
                continue
            self.requests.append(message)
            if self.dies_on_fork:
                self.end.close()
                self.proc.exit(1)
                return
            if self.forks:
                self.end.send(json.dumps({"id": message["id"], "forked": NO_SUCH_PID + message["id"]}).encode())
        self.end.close()


@pytest.fixture
def zygotes(monkeypatch):
    """The zygotes the tuner will start, in order (a start with none left is an error), and a
    fresh pool: no zygote yet, no failure recorded."""
    queue: list[PlayedZygote] = []
    started: list[PlayedZygote] = []

    def start_zygote(python, env, api_module, log_path, mode):
        played = queue.pop(0)
        started.append(played)
        return zygote_mod.Zygote(
            zygote_mod.zygote_key(python, env, mode), log_path, played.tuner_end, played.proc, FAST
        )

    monkeypatch.setattr(zygote_pool, "start_zygote", start_zygote)
    monkeypatch.setattr(zygote_pool, "_current", None)
    monkeypatch.setattr(zygote_pool, "_failed", set())
    monkeypatch.setattr(zygote_pool, "_failures", [])
    yield queue, started
    zygote_pool.close()


def fork(tmp_path: Path, timeout_s: float = START_TIMEOUT_S) -> zygote_mod.ForkedServer:
    read_fd, write_fd = os.pipe()
    try:
        server = zygote_pool.ServerFork("py", {}, "api", ["--port", "1"], tmp_path / "server.log", read_fd, 0, "t")
        return zygote_pool.fork_server(server, timeout_s)
    finally:
        os.close(read_fd)
        os.close(write_fd)


def timed(call):
    t0 = time.monotonic()
    result = call()
    return result, time.monotonic() - t0


def test_a_zygote_that_does_not_answer_a_ping_is_killed_and_a_new_one_forks_the_server(zygotes, tmp_path):
    queue, started = zygotes
    queue += [PlayedZygote(), PlayedZygote()]
    assert fork(tmp_path).zygote.proc is started[0].proc
    started[0].silent.set()  # stopped answering between two starts (stuck, swapped out)
    forked, took = timed(lambda: fork(tmp_path))
    assert took < 3.0 and forked.zygote.proc is started[1].proc
    assert started[0].proc.killed.is_set() and started[0].requests and len(started[0].requests) == 1
    line = f"the study's zygote (pid {NO_SUCH_PID}) did not answer a ping within 0.3 s"
    assert forked.zygote_failures == [line] and forked.note == f"a new zygote: {line} (killed)"
    assert [f.line for f in zygote_status().failures] == [line] and not zygote_status().exec_only


def test_a_zygote_that_takes_a_fork_request_and_never_forks_fails_within_the_fork_bound(zygotes, tmp_path):
    queue, started = zygotes
    queue += [PlayedZygote(forks=False), PlayedZygote()]
    forked, took = timed(lambda: fork(tmp_path))
    assert took < 3.0 and forked.zygote.proc is started[1].proc  # not the 300 s start timeout
    assert forked.zygote_failures == [
        f"the study's zygote (pid {NO_SUCH_PID}) did not answer a fork request within 0.3 s"
    ]
    assert started[0].proc.killed.is_set()


def test_a_zygote_that_dies_mid_fork_leaves_the_server_to_be_execd_and_the_next_to_a_new_zygote(zygotes, tmp_path):
    queue, started = zygotes
    queue += [PlayedZygote(), PlayedZygote()]
    fork(tmp_path)
    started[0].dies_on_fork = True
    with pytest.raises(ZygoteGone, match=r"the study's zygote is gone \(exit code 1") as gone:
        fork(tmp_path)
    assert gone.value.failures == [] and zygote_status().failures == ()  # died: not a liveness failure
    assert fork(tmp_path).zygote.proc is started[1].proc


def test_a_stopped_zygote_is_a_failure_at_once_even_while_it_imports(zygotes, tmp_path):
    queue, started = zygotes
    queue += [PlayedZygote(imported=False, state=psutil.STATUS_STOPPED), PlayedZygote()]
    forked, took = timed(lambda: fork(tmp_path))
    assert took < FAST.stall_s  # its CPU time was never asked to stand still for the stall bound
    assert forked.zygote_failures == [
        f"the study's zygote (pid {NO_SUCH_PID}) is stopped ({psutil.STATUS_STOPPED}) while importing vLLM"
    ]
    assert started[0].proc.killed.is_set() and forked.zygote.proc is started[1].proc


def test_an_importing_zygote_whose_cpu_time_grows_is_waited_for(zygotes, tmp_path):
    queue, started = zygotes
    queue += [PlayedZygote(imported=False, cpu_step=0.01)]
    imports_s = 4 * FAST.stall_s  # longer than the stall bound: only its CPU time says it progresses

    def import_then_serve() -> None:
        while not started:  # the tuner starts it when the first server asks
            time.sleep(0.01)
        time.sleep(imports_s)
        started[0].imported.set()

    threading.Thread(target=import_then_serve, daemon=True).start()
    forked, took = timed(lambda: fork(tmp_path))
    assert took >= imports_s and forked.zygote.proc is started[0].proc
    assert forked.zygote_failures == [] and zygote_status().failures == ()


def test_an_importing_zygote_whose_cpu_time_stands_still_is_a_failure(zygotes, tmp_path):
    queue, _ = zygotes
    queue += [PlayedZygote(imported=False), PlayedZygote()]
    forked, took = timed(lambda: fork(tmp_path))
    assert FAST.stall_s <= took < 3.0
    assert forked.zygote_failures == [
        f"the study's zygote (pid {NO_SUCH_PID}) used no CPU for 0.5 s while importing vLLM"
    ]


def test_the_second_failure_execs_every_later_server_and_the_status_says_so(zygotes, tmp_path):
    queue, started = zygotes
    queue += [PlayedZygote(imported=False, state=psutil.STATUS_STOPPED) for _ in range(2)]
    with pytest.raises(ZygoteGone) as gone:
        fork(tmp_path)
    assert len(gone.value.failures) == 2 and all(p.proc.killed.is_set() for p in started)
    assert "no new zygote for the rest of the study" in str(gone.value)
    status = zygote_status()
    assert status.exec_only and status.summary().startswith("the study's zygote failed twice (")
    assert status.summary().endswith(
        "(pid 5000000) is stopped (stopped) while importing vLLM); later servers were exec'd"
    )
    with pytest.raises(ZygoteGone, match="failed twice"):
        fork(tmp_path)  # no zygote started: none is left to start (the queue is empty)
    assert len(started) == 2


def test_one_failure_is_said_with_the_new_zygote_that_took_its_place(zygotes, tmp_path):
    queue, _ = zygotes
    queue += [PlayedZygote(imported=False, state=psutil.STATUS_STOPPED), PlayedZygote()]
    fork(tmp_path)
    assert zygote_status().summary().endswith("while importing vLLM); a new one took its place")


def test_the_zygotes_pid_is_the_current_ones_and_a_test_may_forget_the_failures(zygotes, tmp_path):
    """`zygote_pid` names the zygote a test stops or kills; `forget_failures` (tests only) clears
    this process's record and keeps the zygote, so that a later test gets zygotes again."""
    queue, started = zygotes
    queue += [PlayedZygote(imported=False, state=psutil.STATUS_STOPPED), PlayedZygote()]
    queue[1].proc.pid = NO_SUCH_PID + 1
    assert zygote_pid() is None
    fork(tmp_path)
    assert zygote_pid() == NO_SUCH_PID + 1 and len(zygote_status().failures) == 1
    zygote_pool._failed.add(zygote_mod.zygote_key("py", {"OTHER": "1"}))
    zygote_pool.forget_failures()
    assert zygote_status().failures == () and zygote_pool._failed == set()
    assert zygote_pid() == NO_SUCH_PID + 1 and fork(tmp_path).zygote.proc is started[1].proc
    zygote_pool.close()
    assert zygote_pid() is None


def test_a_zygote_importing_past_the_start_timeout_fails_the_start_as_the_zygotes(zygotes, tmp_path):
    queue, _ = zygotes
    queue += [PlayedZygote(imported=False, cpu_step=0.01)]
    server = VllmServer(LaunchSpec(model=None, args=[], log_path=tmp_path / "server.log", startup_timeout_s=1.0))
    server.port, server._log = 1, open(tmp_path / "server.log", "ab")
    with pytest.raises(ServerFailed) as failed:
        server._fork_from_zygote({}, 0)
    assert failed.value.failure.cls is FailureClass.ZYGOTE
    assert failed.value.failure.line.startswith("not forked after 1 s: the study's zygote is still importing vLLM")
    assert zygote_status().failures == ()  # alive and importing: not killed, the next start asks it again


def test_the_servers_log_says_in_one_line_that_a_new_zygote_forked_it_or_that_it_is_execd(zygotes, tmp_path):
    queue, started = zygotes
    queue += [PlayedZygote(imported=False, state=psutil.STATUS_STOPPED), PlayedZygote()]
    log = tmp_path / "server.log"
    server = VllmServer(LaunchSpec(model=None, args=[], log_path=log))
    server.port, server._log = 1, open(log, "ab")
    assert server._fork_from_zygote({}, 0) is not None
    said = [x for x in log.read_text().splitlines() if x.startswith("autotune: a new zygote")]
    assert said == [
        f"autotune: a new zygote: {server.zygote_failure} (killed); the zygote's log: {tmp_path}/zygote.log"
    ]
    started[1].silent.set()  # the new zygote stops in turn: the second failure
    started[1].proc.state = psutil.STATUS_STOPPED
    again = VllmServer(LaunchSpec(model=None, args=[], log_path=log))
    again.port, again._log = 1, open(log, "ab")
    assert again._fork_from_zygote({}, 0) is None
    last = log.read_text().splitlines()[-1]
    assert last.startswith("autotune: not forked: the study's zygote failed twice (") and last.endswith(
        "no new zygote for the rest of the study; this server is exec'd"
    )


def test_closing_kills_a_stopped_or_importing_zygote_at_once_and_one_that_does_not_exit(monkeypatch, tmp_path):
    monkeypatch.setattr(zygote_mod, "CLOSE_GRACE_S", 0.5)
    for played, answered, at_once in [
        (PlayedZygote(state=psutil.STATUS_STOPPED), True, True),  # cannot read its socket's EOF
        (PlayedZygote(imported=False), False, True),  # reads nothing until its imports are done
        (PlayedZygote(), True, False),  # in its loop, but hung: it never reads the EOF
    ]:
        played.silent.set()  # stopped or hung: it reads nothing
        zygote = zygote_mod.Zygote(("py", (), "forkserver"), tmp_path / "z.log", played.tuner_end, played.proc, FAST)
        zygote.answered = answered
        _, took = timed(zygote.close)
        assert played.proc.killed.is_set() and (took < 0.1 if at_once else took >= 0.5)


def test_a_guard_that_exited_under_a_stopped_zygote_is_seen_as_exited(tmp_path):
    """The zygote reaps a guard and says how it ended; a stopped one cannot, and its server would
    look alive until the start timed out."""
    played = PlayedZygote()
    zygote = zygote_mod.Zygote(("py", (), "forkserver"), tmp_path / "z.log", played.tuner_end, played.proc, FAST)
    server = zygote_mod.ForkedServer(zygote, NO_SUCH_PID)
    assert server.poll() is None  # running: it will say
    played.proc.state = psutil.STATUS_STOPPED
    assert server.poll() == zygote_mod.UNKNOWN_EXIT


class Listed:
    def __init__(self, pid: int, cmdline: list[str], create_time: float):
        self.pid, self.info = pid, {"pid": pid, "cmdline": cmdline, "create_time": create_time}


def zygote_cmdline(tuner: int) -> list[str]:
    return ["python", "-c", zygote_process.ZYGOTE_ENTRY, "serve", "3", str(tuner), "api", "forkserver", "[]"]


def test_zygotes_whose_tuner_is_gone_are_killed_with_their_group_on_the_next_start(monkeypatch):
    """A zygote stopped when its tuner was SIGKILLed never reads the EOF that would end it."""
    killed: list[int] = []
    monkeypatch.setattr(zygote_process.os, "killpg", lambda pid, sig: killed.append(pid))
    us = psutil.Process().create_time()
    processes = [
        Listed(NO_SUCH_PID + 1, zygote_cmdline(NO_SUCH_PID), us),  # its tuner is gone
        Listed(NO_SUCH_PID + 2, zygote_cmdline(os.getpid()), us + 1),  # ours, started after us
        Listed(NO_SUCH_PID + 3, zygote_cmdline(os.getpid()), us - 1),  # its tuner's pid is ours now
        Listed(NO_SUCH_PID + 4, ["python", "-c", "print()", "serve", "3", str(NO_SUCH_PID)], us),
        Listed(NO_SUCH_PID + 5, [], us),  # another user's: its command line unreadable
    ]
    assert zygote_process.kill_orphans(processes) == killed == [NO_SUCH_PID + 1, NO_SUCH_PID + 3]


@pytest.fixture
def entry_side(monkeypatch):
    """The zygote's own module, imported as the zygote imports it (by path, beside its siblings)."""
    monkeypatch.syspath_prepend(str(zygote_process.ENTRY_DIR))
    before = set(sys.modules)
    yield importlib.import_module(zygote_process.MARKER)
    for name in set(sys.modules) - before:  # its siblings, imported by their top-level names
        if str(getattr(sys.modules[name], "__file__", "")).startswith(str(zygote_process.ENTRY_DIR)):
            del sys.modules[name]


def test_the_zygotes_loop_answers_a_ping_and_ends_when_its_tuner_closes_the_socket(entry_side):
    tuner_end, ours = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    loop = threading.Thread(target=entry_side.serve, args=(ours, "api", {}, "forkserver", os.getppid()), daemon=True)
    loop.start()
    tuner_end.settimeout(5.0)
    tuner_end.send(json.dumps({"ping": 7}).encode())
    assert json.loads(tuner_end.recv(1 << 20)) == {"pong": 7}
    tuner_end.close()
    loop.join(timeout=5.0)
    assert not loop.is_alive()


def test_the_zygotes_loop_ends_once_the_tuner_it_serves_is_gone(entry_side):
    tuner_end, ours = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    loop = threading.Thread(target=entry_side.serve, args=(ours, "api", {}, "forkserver", NO_SUCH_PID), daemon=True)
    loop.start()
    loop.join(timeout=5.0)
    assert not loop.is_alive()
    tuner_end.close()
