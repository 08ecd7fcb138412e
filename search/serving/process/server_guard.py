"""Keeps a vLLM server from outliving the tuner that started it.

Started by `search.serving.process.server` in a new session (so it leads a fresh process group), it runs the
vLLM command as its child in that group and watches a pipe whose write end only the tuner
holds. If the tuner dies (even by SIGKILL) the pipe reads EOF and the guard kills the whole
group: API server, EngineCore and workers, which would otherwise be orphaned (killing the
API server alone leaves EngineCore running). Its exit code is the server's.

Usage: python -m search.serving.process.server_guard PIPE_FD -- CMD...
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


def main(argv: list[str]) -> int:
    fd = int(argv[0])
    cmd = argv[argv.index("--") + 1:]
    child = subprocess.Popen(cmd)
    # A TERM sent to the group reaches the child too; the guard just waits for it.
    signal.signal(signal.SIGTERM, lambda *_: None)
    while True:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready and not os.read(fd, 1):  # EOF: the tuner is gone
            _kill_group(grace_s=5.0)
        rc = child.poll()
        if rc is not None:
            return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
