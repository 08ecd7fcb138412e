"""A server's process group and its port, as the tuner reads them: a port held for the server
until vLLM binds it, the group's members, whether some or all are stopped, whether its port still
listens, and what the kernel's log says of an OOM kill. Read through psutil and the kernel; nothing
here starts or signals a process."""

from __future__ import annotations

import os
import socket
import subprocess

import psutil

from serving.failures import oom_kill_in
from serving.process.launch_spec import HOST


def reserve_port() -> socket.socket:
    """A free port held until vLLM has bound it: a socket bound with SO_REUSEADDR that never
    listens. vLLM binds with SO_REUSEADDR too (and listens), which Linux allows beside it; a plain
    bind or another port-0 pick is refused it. Closing the socket and handing the number over
    would leave a window in which another process could take it (port_busy)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((HOST, 0))
    return s


def kernel_oom_kill(pids: set[int], since_s: float) -> str | None:
    """The kernel log's OOM-kill line for one of `pids` after `since_s` (seconds since boot);
    "" when the log is readable and has none, None when it cannot be read."""
    try:
        out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return oom_kill_in(out.stdout, pids, since_s) if out.returncode == 0 else None


def port_listening(port: int) -> bool:
    try:
        conns = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:  # pragma: no cover - non-root on some kernels
        with socket.socket() as s:
            return s.connect_ex((HOST, port)) == 0
    return any(c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN for c in conns)


def group_stopped(members: list[psutil.Process]) -> bool:
    """Some process of the group is stopped (SIGSTOP, SIGTSTP, a tracer)."""
    for p in members:
        try:
            if p.status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
                return True
        except psutil.NoSuchProcess:
            continue
    return False


def all_stopped(pids: set[int]) -> bool:
    """Every live process of `pids` is stopped (SIGSTOP, SIGTSTP, a tracer): none of them can
    answer anything until it is continued."""
    states = []
    for pid in pids:
        try:
            states.append(psutil.Process(pid).status())
        except psutil.NoSuchProcess:
            continue
    live = [s for s in states if s != psutil.STATUS_ZOMBIE]
    return bool(live) and all(s in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP) for s in live)


def group_members(pgid: int) -> list[psutil.Process]:
    alive = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            continue
    return alive
