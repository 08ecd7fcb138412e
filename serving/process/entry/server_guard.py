"""Keeps a vLLM server from outliving the tuner that started it.

Started by `serving.process.server` in a new session (so it leads a fresh process group), it runs the
vLLM command as its child in that group and watches a pipe whose write end only the tuner
holds. If the tuner dies (even by SIGKILL) the pipe reads EOF and the guard kills the whole
group: API server, EngineCore and workers, which would otherwise be orphaned (killing the
API server alone leaves EngineCore running). Its exit code is the server's.

It also lowers the server's CPU priority (`--nice N`, when N > 0) so that a load client sharing
its cores is never kept waiting behind it (see `lower_priority`).

Usage: python -m serving.process.entry.server_guard PIPE_FD [--nice N] -- CMD...

A server forked by the study's zygote (`autotune_vllm_zygote`) has the same guard, forked rather
than exec'd (`watch`). This file is imported by path there: standard library only.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time


def _kill_group(grace_s: float) -> None:
    pgid = os.getpgrp()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the TERM below is for the others
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    time.sleep(grace_s)
    os.killpg(pgid, signal.SIGKILL)  # includes this process


def lower_priority(nice: int) -> None:
    """This session's scheduling group and this process (so every vLLM process under it) at
    `nice`. On a machine with few cores the EngineCore's busy wait for a long prefill shares the
    load client's core, and with the kernel's autogroups (one group per session) the client can
    wait hundreds of milliseconds on the run queue, so requests go out late; with the server's
    group at a higher nice the client runs when it needs to (docs/results.md, "Client lag and
    CPU priority"). The client uses about 1% of a core, so the server loses nothing it would
    otherwise have had."""
    if nice <= 0:
        return
    try:
        with open("/proc/self/autogroup", "w") as f:  # the session's group (absent: no autogroups)
            f.write(str(nice))
    except OSError:
        pass
    try:
        os.nice(nice)
    except OSError:
        pass


def watch(fd: int, child_exit_code) -> int:
    """Wait for the server (`child_exit_code()`: its exit code once it has exited, else None)
    while watching the tuner's pipe `fd`; the server's exit code, shell-style (128 + signal)."""
    # A TERM sent to the group reaches the child too; the guard just waits for it.
    signal.signal(signal.SIGTERM, lambda *_: None)
    while True:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready and not os.read(fd, 1):  # EOF: the tuner is gone
            _kill_group(grace_s=5.0)
        rc = child_exit_code()
        if rc is not None:
            return rc if rc >= 0 else 128 - rc


def main(argv: list[str]) -> int:
    fd = int(argv[0])
    cmd = argv[argv.index("--") + 1 :]
    if "--nice" in argv[: argv.index("--")]:
        lower_priority(int(argv[argv.index("--nice") + 1]))
    child = subprocess.Popen(cmd)
    return watch(fd, child.poll)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
