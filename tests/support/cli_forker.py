"""The forking interpreter behind tests.support.cli (run_forked, spawn_forked): it imports the
tuner's command once, with its stdout and stderr kept aside, then for each request (a JSON line on
stdin) forks a child that runs the requested module as `python -m` would. It answers (JSON lines on
stdout) with the child's pid at once, and with its exit code once it has ended; several children
may run at once. One thread: it waits on its stdin 5 ms at a time and reaps its ended children in
between. It ends once its stdin is closed and its last child has ended.

The child: the request's working directory and environment, an empty stdin, stdout and stderr to
the request's files (stderr to stdout's where it names none) with what the import printed written
first, the module run as `__main__` (runpy); its exception or SystemExit ends it as it ends a fresh
interpreter.

    python -m tests.support.cli_forker
"""

from __future__ import annotations

import json
import os
import runpy
import select
import sys
import tempfile

POLL_S = 0.005


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
    fds = [os.open(os.devnull, os.O_RDONLY), os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)]
    if request["stderr"] is None:  # into stdout, as Popen's stderr=STDOUT
        fds.append(os.dup(fds[1]))
    else:
        fds.append(os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    for fd, new in enumerate(fds):
        os.dup2(new, fd)
        os.close(new)
    for fd, text in zip((1, 2), printed):
        os.write(fd, text)
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [request["module"], *request["argv"]]
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


def answer(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    printed = imported()
    children: dict[int, int] = {}  # pid: its request's id
    unread = b""
    reading = True
    while reading or children:
        ready, _, _ = select.select([0] if reading else [], [], [], POLL_S)
        if ready:
            chunk = os.read(0, 1 << 16)
            reading = bool(chunk)
            unread += chunk
            while b"\n" in unread:
                line, unread = unread.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    child(request, printed)
                    sys.exit(0)  # the module ran to its end
                children[pid] = request["id"]
                answer({"id": request["id"], "pid": pid})
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            answer({"id": children.pop(pid), "returncode": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    main()
