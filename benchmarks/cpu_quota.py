"""A slower server on this machine: every vLLM server in a CPU cgroup of a few cores, the load
generator outside it at full speed. What "check it on a server slowed on purpose" runs.

    .venv/bin/python -m benchmarks.cpu_quota CORES COMMAND...
        e.g. .venv/bin/python -m benchmarks.cpu_quota 0.67 make search SCENARIO=mixed STUDY=slow-1

runs COMMAND and, while it runs, moves each vLLM server it starts into the cgroup once the server
listens (its start is not slowed, only what it serves): a server is a session of the command's
descendants in which a process listens on a TCP port. Every server runs in its own session, the
zygote's forks too, each led by a guard with the listening API server under it; the zygote
itself listens on none. SIGTERM goes on to COMMAND; Ctrl-C reaches it directly. `bench_calibration
--server-cpu-quota` moves its servers in-process instead. cgroup v1 `cpu` or v2 `cpu.max`; needs
root. On this 2-core CPU 0.67 cores serve the built-in model about 3 times slower: calibrate
both, the ratio is a measurement, not this number.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from serving.process import VllmServer

CGROUP_NAME = "autotune-bench-quota"
POLL_S = 0.5


class CpuQuota:
    """A CPU cgroup of `cores` cores that servers' processes are moved into."""

    def __init__(self, cores: float, period_us: int = 100_000):
        v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
        self.cores = cores
        self.path = Path("/sys/fs/cgroup" if v2 else "/sys/fs/cgroup/cpu") / CGROUP_NAME
        self.path.mkdir(exist_ok=True)
        quota = int(cores * period_us)
        if v2:
            (self.path / "cpu.max").write_text(f"{quota} {period_us}")
        else:
            (self.path / "cpu.cfs_period_us").write_text(str(period_us))
            (self.path / "cpu.cfs_quota_us").write_text(str(quota))

    def take_session(self, sid: int) -> int:
        """Move every process of session `sid` into the cgroup; how many moved."""
        moved = 0
        for p in psutil.process_iter():
            try:
                if os.getsid(p.pid) == sid:
                    (self.path / "cgroup.procs").write_text(str(p.pid))
                    moved += 1
            except (ProcessLookupError, psutil.Error, OSError):
                continue  # gone meanwhile
        return moved

    def install(self) -> None:
        """Every server this process starts from now on runs in the quota once healthy."""
        started = VllmServer.start
        quota = self

        def start(server: VllmServer) -> None:
            started(server)
            assert server.pgid is not None
            quota.take_session(os.getsid(server.pgid))

        VllmServer.start = start  # type: ignore[method-assign,assignment]

    def watch(self, command: subprocess.Popen) -> int:
        """Move each server `command` starts into the quota until it exits; its exit status."""
        parent = psutil.Process(command.pid)
        own = os.getsid(command.pid)
        taken: set[int] = set()
        while command.poll() is None:
            try:
                children = parent.children(recursive=True)
            except psutil.NoSuchProcess:
                break
            for p in children:
                try:
                    sid = os.getsid(p.pid)
                    if sid == own or sid in taken:
                        continue
                    if any(c.status == psutil.CONN_LISTEN for c in p.net_connections(kind="tcp")):
                        taken.add(sid)
                        moved = self.take_session(sid)
                        print(f"cpu_quota: server session {sid}: {moved} processes in {self.cores} cores", flush=True)
                except (ProcessLookupError, psutil.Error, OSError):
                    continue
            time.sleep(POLL_S)
        return command.wait()


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m benchmarks.cpu_quota CORES COMMAND...", file=sys.stderr)
        return 2
    quota = CpuQuota(float(argv[0]))
    command = subprocess.Popen(argv[1:])

    def forward(signum: int, _frame: object) -> None:
        # A study stops cleanly on its own SIGTERM (its servers down, its trial recorded as
        # interrupted); the watcher passes it on and waits for it.
        command.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    # A terminal's Ctrl-C reaches the command itself (it shares the watcher's process group):
    # passed on too it would interrupt the study's own clean-up a second time.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return quota.watch(command)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
