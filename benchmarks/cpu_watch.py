"""How much CPU a benchmark's processes took, and other processes beside them (this machine is
shared): a tool run's own CPU, a server's per process, and what everything else used meanwhile.
"""

from __future__ import annotations

import os
import resource
import time

import numpy as np
import psutil


def cpu_in_window(timeline: list[tuple[float, float]], start: float, end: float) -> float:
    """CPU seconds a sampled process used between two CLOCK_MONOTONIC times (interpolated)."""
    if len(timeline) < 2:
        return float("nan")
    ts = np.array([t for t, _ in timeline])
    cs = np.array([c for _, c in timeline])
    return float(np.interp(end, ts, cs) - np.interp(start, ts, cs))


class ChildCpu:
    """CPU seconds (user + system) of the child processes that ended inside the block: one
    `subprocess.run` is one tool run, startup and all (a running server never ends, so it is
    not counted)."""

    def __enter__(self) -> ChildCpu:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        self._t0 = r.ru_utime + r.ru_stime
        self._ctx0 = (r.ru_nvcsw, r.ru_nivcsw, r.ru_majflt)
        self.seconds = float("nan")
        return self

    def __exit__(self, *exc) -> None:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.seconds = r.ru_utime + r.ru_stime - self._t0
        self.voluntary = r.ru_nvcsw - self._ctx0[0]
        self.involuntary = r.ru_nivcsw - self._ctx0[1]
        self.major_faults = r.ru_majflt - self._ctx0[2]


def _main_thread_wait_s(pid: int) -> float:
    """Seconds the process's main thread spent runnable but waiting for a CPU (schedstat)."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class TreeCpu:
    """CPU seconds each process of a tree (e.g. a vLLM server: API server, engine core) used
    inside the block, keyed by a short name."""

    def __init__(self, root_pid: int | None):
        self.root = root_pid
        self.by_name: dict[str, float] = {}
        self.wait_by_name: dict[str, float] = {}  # main thread runnable but not running (s)

    def _sample(self) -> dict[int, tuple[str, float]]:
        out = {}
        if self.root is None:
            return out
        try:
            root = psutil.Process(self.root)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return out
        for p in procs:
            try:
                t = p.cpu_times()
                name = p.name()
                cmd = p.cmdline()
                if "server_guard" in " ".join(cmd):
                    name = "guard"
                elif "vllm.entrypoints" in " ".join(cmd) or ("serve" in cmd and "vllm" in " ".join(cmd)):
                    name = "api_server"
                out[p.pid] = (name, t.user + t.system, _main_thread_wait_s(p.pid))
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return out

    def __enter__(self) -> TreeCpu:
        self._t0 = time.monotonic()
        self._before = self._sample()
        return self

    def __exit__(self, *exc) -> None:
        after = self._sample()
        self.wall_s = time.monotonic() - self._t0
        for pid, (name, c, w) in after.items():
            _, c0, w0 = self._before.get(pid, (name, 0.0, 0.0))
            self.by_name[name] = self.by_name.get(name, 0.0) + c - c0
            self.wait_by_name[name] = self.wait_by_name.get(name, 0.0) + w - w0


# -- noise


def _our_pids(*roots: int | None) -> set[int]:
    pids = set()
    for root in (os.getpid(), *roots):
        if root is None:
            continue
        try:
            me = psutil.Process(root)
            pids |= {me.pid, *(p.pid for p in me.children(recursive=True))}
        except psutil.NoSuchProcess:
            pass
    return pids


def _cpu_by_pid() -> dict[int, float]:
    out = {}
    for p in psutil.process_iter(["pid"]):
        try:
            t = p.cpu_times()
            out[p.pid] = t.user + t.system
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def _proc_stat() -> dict[str, float]:
    """Machine-wide CPU seconds by kind (/proc/stat), all CPUs together."""
    with open("/proc/stat") as f:
        values = f.readline().split()[1 : 1 + len(_STAT_FIELDS)]
    tick = os.sysconf("SC_CLK_TCK")
    return {k: int(v) / tick for k, v in zip(_STAT_FIELDS, values)}


class ForeignCpu:
    """CPU (in cores) that processes outside this benchmark's tree used over an interval, and
    the machine's idle, kernel (irq, softirq) and stolen (by the hypervisor) time in cores."""

    def __init__(self, server_pid: int | None = None):
        self.server_pid = server_pid  # a server this benchmark did not start is not foreign either

    def __enter__(self) -> ForeignCpu:
        self.t0, self.cpu0, self.stat0 = time.monotonic(), _cpu_by_pid(), _proc_stat()
        self.cores = float("nan")
        self.machine: dict[str, float] = {}
        return self

    def __exit__(self, *exc) -> None:
        cpu1, mine, stat1 = _cpu_by_pid(), _our_pids(self.server_pid), _proc_stat()
        dt = time.monotonic() - self.t0
        used = sum(c - self.cpu0.get(pid, c) for pid, c in cpu1.items() if pid not in mine)
        self.cores = max(0.0, used / dt) if dt > 0 else float("nan")
        self.machine = {k: (stat1[k] - self.stat0[k]) / dt if dt > 0 else float("nan") for k in stat1}


def wait_for_quiet(max_cores: float = 0.25, window_s: float = 2.0, timeout_s: float = 180.0) -> float:
    """Wait until other processes use less than `max_cores`; returns the last reading."""
    deadline = time.monotonic() + timeout_s
    while True:
        with ForeignCpu() as fc:
            time.sleep(window_s)
        if fc.cores <= max_cores or time.monotonic() > deadline:
            return fc.cores
