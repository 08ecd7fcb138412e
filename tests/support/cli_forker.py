"""The forking interpreter behind tests.support.cli.run_forked: it imports the tuner's command once,
with its stdout and stderr kept aside, then for each request (a JSON line on stdin) forks a child
that runs the requested module as `python -m` would, and answers (a JSON line on stdout) with the
child's exit code once it has ended, or has been killed at its timeout.

The child: the request's working directory and environment, an empty stdin, stdout and stderr to
the request's files with what the import printed written first, the module run as `__main__`
(runpy); its exception or SystemExit ends it as it ends a fresh interpreter.

    python -m tests.support.cli_forker
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import tempfile
import time


def imported() -> list[bytes]:
    """Imports app.cli; what that printed to stdout and to stderr."""
    kept = [os.dup(1), os.dup(2)]
    files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
    for fd, f in zip((1, 2), files):
        os.dup2(f.fileno(), fd)
    try:
        import app.cli  # noqa: F401
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, k in zip((1, 2), kept):
            os.dup2(k, fd)
            os.close(k)
    printed = []
    for f in files:
        f.seek(0)
        printed.append(f.read())
        f.close()
    return printed


def child(request: dict, printed: list[bytes]) -> None:
    os.chdir(request["cwd"])
    fds = [os.open(os.devnull, os.O_RDONLY)]
    fds += [os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) for name in ("stdout", "stderr")]
    for fd, new in enumerate(fds):
        os.dup2(new, fd)
        os.close(new)
    for fd, text in zip((1, 2), printed):
        os.write(fd, text)
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [request["module"], *request["argv"]]
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


def wait(pid: int, timeout: float | None) -> tuple[int, bool]:
    """The child's exit code (negative: the signal that ended it), and whether it ran out of time."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), False
        if deadline is not None and time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), True
        time.sleep(0.005)


def main() -> None:
    printed = imported()
    while line := sys.stdin.readline():
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            child(request, printed)
            sys.exit(0)  # the module ran to its end
        code, timed_out = wait(pid, request["timeout"])
        print(json.dumps({"returncode": code, "timed_out": timed_out}), flush=True)


if __name__ == "__main__":
    main()
