"""The real `autotune` command (and the benchmark scripts), each run in a process of its own as a
user runs it.

`autotune` starts a fresh interpreter, as `python -m app.cli` does. `autotune_forked` (and
`run_forked`, for any module run as `python -m MODULE`) runs the module as `__main__` in a process
forked from one interpreter that imported `app.cli` once (tests.support.cli_forker): its own
process, working directory, environment, stdin (empty), stdout, stderr and exit code, with
whatever the import printed printed first, as a fresh interpreter prints it. A command that
refuses its input within a fraction of a second would otherwise spend seconds importing the
tuner, and the suite runs dozens of them. A study runs forked too: its zygote and servers are its
own, started after the fork, and exit with it. `spawn_forked` is the same process left running,
as `subprocess.Popen` leaves one, for a test that runs several at once or signals one (the study
workers of the PostgreSQL tests). What a test must see by its own command line (the password
tests) is started with `subprocess`, and `autotune` stays for what must import the tuner afresh
(the environment it reads at import, one refusal in a fresh interpreter).
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import signal
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
    with tempfile.TemporaryDirectory(prefix="autotune-forked-") as d:
        proc = spawn_forked(module, *args, stdout=Path(d) / "stdout", stderr=Path(d) / "stderr", cwd=cwd)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            stdout, stderr = proc.output()
            raise subprocess.TimeoutExpired(proc.args, timeout or 0, output=stdout, stderr=stderr) from None
        return subprocess.CompletedProcess(proc.args, code, *proc.output())


def spawn_forked(
    module: str, *args, stdout: Path, stderr: Path | None, cwd: Path = REPO, env: dict[str, str] | None = None
) -> ForkedProcess:
    """`python -m module *args` in `cwd` as `subprocess.Popen` starts it, forked from an interpreter
    that has imported `app.cli`; its stdout and stderr go to those files (stderr None: to stdout,
    as Popen's `stderr=subprocess.STDOUT`)."""
    global _forker
    with _lock:
        if _forker is None or not _forker.running():
            _forker = _Forker()
        forker = _forker
    proc = ForkedProcess([sys.executable, "-m", module, *map(str, args)], stdout, stderr)
    for path in (stdout, stderr):  # there, and empty, once this returns (as a file given to Popen)
        if path is not None:
            path.write_bytes(b"")
    forker.fork(
        proc,
        {
            "module": module,
            "argv": proc.args[3:],
            "cwd": str(cwd),
            "env": dict(os.environ if env is None else env),
            "stdout": str(stdout),
            "stderr": None if stderr is None else str(stderr),
        },
    )
    return proc


class ForkedProcess:
    """A process `spawn_forked` started: what a test asks of a `subprocess.Popen` (pid, poll, wait,
    send_signal, kill, returncode, communicate), its exit code as the forking interpreter reaped it."""

    def __init__(self, args: list[str], stdout: Path, stderr: Path | None) -> None:
        self.args = args
        self.stdout_path, self.stderr_path = stdout, stderr
        self.pid = 0
        self.returncode: int | None = None
        self.forked, self.ended = threading.Event(), threading.Event()
        self.lost = False  # the forking interpreter ended before it said how this process did

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self.ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        assert not self.lost and self.returncode is not None, "the forking interpreter ended"
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """As Popen's: to the process while it has not been reaped (its pid is its own until then)."""
        if self.returncode is None and not self.lost:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def output(self) -> tuple[str, str]:
        """Its stdout and stderr as written so far."""
        out, err = (
            p.read_text(errors="replace") if p is not None and p.exists() else ""
            for p in (self.stdout_path, self.stderr_path)
        )
        return out, err

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Waits for it to end; its stdout and stderr as written."""
        self.wait(timeout)
        return self.output()


class _Forker:
    """The forking interpreter: a request (a JSON line) forks one process; the answers say its pid
    at once and its exit code once it has ended, read here by a thread of their own."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.cli_forker"],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.pending: dict[int, ForkedProcess] = {}
        self.ids = itertools.count()
        self.lock = threading.Lock()
        self.gone = False
        threading.Thread(target=self._answers, name="autotune-forker-answers", daemon=True).start()

    def running(self) -> bool:
        return not self.gone and self.proc.poll() is None

    def fork(self, proc: ForkedProcess, request: dict) -> None:
        assert self.proc.stdin is not None
        with self.lock:
            assert not self.gone, f"the forking interpreter ended (exit code {self.proc.poll()})"
            number = next(self.ids)
            self.pending[number] = proc
            self.proc.stdin.write(json.dumps({**request, "id": number}) + "\n")
            self.proc.stdin.flush()
        proc.forked.wait()
        assert not proc.lost, f"the forking interpreter ended (exit code {self.proc.wait()})"

    def _answers(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            answer = json.loads(line)
            with self.lock:
                proc = self.pending[answer["id"]]
                if "returncode" in answer:
                    del self.pending[answer["id"]]
            if "pid" in answer:
                proc.pid = answer["pid"]
                proc.forked.set()
            else:
                proc.returncode = answer["returncode"]
                proc.ended.set()
        with self.lock:
            self.gone = True
            left, self.pending = list(self.pending.values()), {}
        for proc in left:
            proc.lost = True
            proc.forked.set()
            proc.ended.set()

    def close(self) -> None:
        assert self.proc.stdin is not None
        if self.proc.poll() is None:
            self.proc.stdin.close()  # it ends once its last process has
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _close() -> None:
    if _forker is not None:
        _forker.close()


_forker: _Forker | None = None
_lock = threading.Lock()
atexit.register(_close)
