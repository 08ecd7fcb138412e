"""The real `autotune` command (and the benchmark scripts), each run in a process of its own as a
user runs it.

`autotune` starts a fresh interpreter, as `python -m app.cli` does. `autotune_forked` (and
`run_forked`, for any module run as `python -m MODULE`) runs the module as `__main__` in a process
forked from one interpreter that imported `app.cli` once: its own process, working directory,
environment, stdin (empty), stdout, stderr and exit code, with whatever the import printed
printed first, as a fresh interpreter prints it. A command that refuses its input within a
fraction of a second would otherwise spend seconds importing the tuner, and the suite runs
dozens of them. What starts a study, a server or a dashboard runs fresh (`autotune`).
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from tests.support.paths import REPO


def autotune(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *map(str, args)], cwd=REPO, capture_output=True, text=True, **kw
    )


def autotune_forked(*args, timeout: float | None = None) -> subprocess.CompletedProcess:
    """`autotune(*args)`, forked from an interpreter that has imported the command already."""
    return run_forked("app.cli", *args, timeout=timeout)


def run_forked(module: str, *args, timeout: float | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """`python -m module *args` in `cwd`, forked from an interpreter that has imported `app.cli`."""
    global _forker
    with _lock:
        if _forker is None or _forker.poll() is not None:
            _forker = subprocess.Popen(
                [sys.executable, "-c", _FORKER], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
        argv = [str(a) for a in args]
        with tempfile.TemporaryDirectory(prefix="autotune-forked-") as d:
            out, err = Path(d) / "stdout", Path(d) / "stderr"
            request = {
                "module": module,
                "argv": argv,
                "cwd": str(cwd),
                "env": dict(os.environ),
                "stdout": str(out),
                "stderr": str(err),
                "timeout": timeout,
            }
            assert _forker.stdin is not None and _forker.stdout is not None
            _forker.stdin.write(json.dumps(request) + "\n")
            _forker.stdin.flush()
            reply = _forker.stdout.readline()
            assert reply, f"the forking interpreter ended (exit code {_forker.wait()})"
            answer = json.loads(reply)
            cmd = [sys.executable, "-m", module, *argv]
            stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
            if answer["timed_out"]:
                raise subprocess.TimeoutExpired(cmd, timeout or 0, output=stdout, stderr=stderr)
            return subprocess.CompletedProcess(cmd, answer["returncode"], stdout, stderr)


def _close() -> None:
    if _forker is not None and _forker.poll() is None:
        assert _forker.stdin is not None
        _forker.stdin.close()  # it ends at the end of its requests
        try:
            _forker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _forker.kill()
            _forker.wait()


_forker: subprocess.Popen | None = None
_lock = threading.Lock()
atexit.register(_close)

# The forking interpreter: imports the command with its stdout and stderr kept aside, then for each
# request (a JSON line on stdin) forks a child that runs the module as `python -m` would, and
# answers (a JSON line on stdout) with the child's exit code once it has ended or been killed at
# its timeout. The child's exception or SystemExit ends it as it ends a fresh interpreter.
_FORKER = r"""
import json, os, runpy, signal, sys, tempfile, time

def imported():
    kept = [os.dup(1), os.dup(2)]
    files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
    for fd, f in zip((1, 2), files):
        os.dup2(f.fileno(), fd)
    try:
        import app.cli
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

def child(req, printed):
    os.chdir(req["cwd"])
    fds = [os.open(os.devnull, os.O_RDONLY)]
    fds += [os.open(req[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) for name in ("stdout", "stderr")]
    for fd, new in enumerate(fds):
        os.dup2(new, fd)
        os.close(new)
    for fd, text in zip((1, 2), printed):
        os.write(fd, text)
    os.environ.clear()
    os.environ.update(req["env"])
    sys.argv = [req["module"], *req["argv"]]
    runpy.run_module(req["module"], run_name="__main__", alter_sys=True)

def wait(pid, timeout):
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), False
        if deadline is not None and time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), True
        time.sleep(0.005)

printed = imported()
while True:
    line = sys.stdin.readline()
    if not line:
        break
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        child(req, printed)
        sys.exit(0)
    code, timed_out = wait(pid, req["timeout"])
    print(json.dumps({"returncode": code, "timed_out": timed_out}), flush=True)
"""
