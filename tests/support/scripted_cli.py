"""The real `autotune` command with scripted trials: its own processes (`search --workers N`
starts real `autotune worker` children, each this module again), the real study loop and
database, no vLLM server. The hardware and model are tests.support.fakes.ctx's; each trial
takes TRIAL_S, long enough for a test to watch the processes.

    python -m tests.support.scripted_cli search SCENARIO --workers 2 --storage URL ...
"""

from __future__ import annotations

import sys
import time

import app.workers
import search.prepare
import search.study.loop
from app.cli import main
from tests.support.fakes import ctx
from tests.support.scripted_executor import ScriptedExecutor

TRIAL_S = 0.3


def scripted() -> None:
    executor = ScriptedExecutor(before=lambda plan: time.sleep(TRIAL_S))
    search.prepare.launch_context = lambda *args, **kw: ctx()
    search.study.loop.vllm_executor = lambda prep: executor.factory
    real_argv = app.workers.worker_argv

    def worker_argv(*args, **kw) -> list[str]:  # the workers' real command line, run by this module
        argv = real_argv(*args, **kw)
        argv[argv.index("app.cli")] = "tests.support.scripted_cli"
        return argv

    app.workers.worker_argv = worker_argv


if __name__ == "__main__":
    scripted()
    sys.exit(main(sys.argv[1:]))
