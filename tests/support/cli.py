"""The real `autotune` command (and the benchmark scripts), each run in a process of its own as a
user runs it.

`autotune` starts a fresh interpreter, as `python -m app.cli` does. `autotune_forked` (and
`run_forked`, for any module run as `python -m MODULE`) runs the module as `__main__` in a process
forked from one interpreter that imported `app.cli` once (tests.support.cli_forker): its own
process, working directory, environment, stdin (empty), stdout, stderr and exit code, with
whatever the import printed printed first, as a fresh interpreter prints it. A command that
refuses its input within a fraction of a second would otherwise spend seconds importing the
tuner, and the suite runs dozens of them. A study runs forked too: its zygote and servers are its
own, started after the fork, and exit with it. What a test signals while it runs (a dashboard, a
tuner it kills) is started with `subprocess`, and `autotune` stays for what must import the tuner
afresh (the environment it reads at import, one refusal in a fresh interpreter).
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
                [sys.executable, "-m", "tests.support.cli_forker"],
                cwd=REPO,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
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
