"""The project's files one trial passes through, from `autotune search` to its SQLite row.

Runs a one-trial study in this process on the installed vLLM (the built-in model, a small
capacity scenario of the test fixtures, absolute bounds: no calibration, no confirmation) under a
profiler, and lists every product file that ran while the study measured and recorded its trial,
with the files on the call stack that led there (the CLI, the loop). The result is what
docs/architecture.md's "One trial" section lists.

    python scripts/trial_path.py    # one file a line with the functions that ran in it, then the count

The study's own output goes to standard error.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import threading
from collections import defaultdict
from pathlib import Path
from types import FrameType

REPO = Path(__file__).resolve().parent.parent
PRODUCT = ("app", "search", "objectives", "serving", "loadgen", "storage", "vllm_http", "configs")
SCENARIO = REPO / "tests" / "fixtures" / "scenarios" / "loop_capacity.yaml"
TRIAL_FUNCTION = "_run_one"  # search/study/loop.py: StudyRunner's one trial, claimed to recorded


def product_file(filename: str) -> str | None:
    try:
        rel = Path(filename).resolve().relative_to(REPO)
    except ValueError:
        return None
    return str(rel) if rel.parts and rel.parts[0] in PRODUCT else None


class TrialTrace:
    """Product files run inside the first trial's extent, and the stack that called it."""

    def __init__(self) -> None:
        self.files: defaultdict[str, set[str]] = defaultdict(set)  # file -> its functions that ran
        self.active = False
        self.done = False
        self.trial_frame: FrameType | None = None
        self.lock = threading.Lock()

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if self.done:
            return
        if event == "return" and frame is self.trial_frame:
            self.active, self.done = False, True  # the trial is recorded: what follows is not its path
            return
        if event != "call":
            return
        code = frame.f_code
        if code.co_name == TRIAL_FUNCTION and product_file(code.co_filename) and not self.active:
            self.active, self.trial_frame = True, frame
            self._stack(frame)
        if self.active:
            name = product_file(code.co_filename)
            if name:
                with self.lock:
                    self.files[name].add(code.co_qualname)

    def _stack(self, frame: FrameType | None) -> None:
        while frame is not None:
            name = product_file(frame.f_code.co_filename)
            if name:
                self.files[name].add(frame.f_code.co_qualname)
            frame = frame.f_back


def main() -> int:
    sys.path.insert(0, str(REPO))
    from app.cli import main as autotune

    trace = TrialTrace()
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["search", str(SCENARIO), "--trials", "1", "--confirm-runs", "0"]
        argv += ["--storage", f"sqlite:///{tmp}/trial_path.db", "--runs-dir", tmp]
        threading.setprofile(trace)
        sys.setprofile(trace)
        try:
            with contextlib.redirect_stdout(sys.stderr):
                rc = autotune(argv)
        except SystemExit as e:
            rc = int(e.code or 0)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
    if rc:
        print(f"the study ended with exit code {rc}", file=sys.stderr)
        return rc
    for name, functions in sorted(trace.files.items()):
        shown = sorted(f for f in functions if "<" not in f)  # comprehensions and lambdas left out
        print(f"{name}: {', '.join(shown[:6])}{', ...' if len(shown) > 6 else ''}")
    print(f"{len(trace.files)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
