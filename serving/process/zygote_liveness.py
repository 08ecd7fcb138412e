"""Whether the study's zygote is alive and making progress while a start waits on it: the
bounds, the progress of one still importing vLLM, and the zygote failures of this tuner process
(after `GIVE_UP_AFTER` of them the rest of the study's servers are exec'd: `ZygoteStatus`).

What each bound is for (docs/serving.md, "The study's zygote"):
- a zygote that has answered once sits in its loop, which reads its socket every 0.2 s: a ping
  unanswered for `ping_s` means it is stopped, hung, or swapped out too deep to serve a start;
- it forks a guard at once when asked (the fork of an interpreter with vLLM imported and the
  guard's `setsid`: milliseconds): no answer to a fork request for `fork_s` is the same;
- before its first answer it imports vLLM and reads nothing (tens of seconds on a CPU, minutes on
  a GPU), so it cannot be asked: it makes progress while its CPU time grows. `stall_s` without a
  tick of CPU time (10 ms) is no progress: an import reading a cold disk still ticks.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from serving.process.zygote_process import ZygoteProcess

GIVE_UP_AFTER = 2  # zygote failures in one tuner process, after which its servers are exec'd
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
