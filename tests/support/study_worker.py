"""One worker of a shared study, as a process of its own: the real study loop on a scripted
executor and a scripted calibration, for tests of many workers on one PostgreSQL study.

    python -m tests.support.study_worker URL RUNS_DIR TRIALS SLOT [--trial-s S] [--slow-trial-s S]
        [--host NAME] [--grace S]

Prints one JSON line per event to stdout (flushed): {"event": "started", "trial": N},
{"event": "note", "text": ...}, {"event": "calibrated"}, {"event": "done"}. `--host` makes the
worker record another host name, so a worker beside it cannot see its process and must go by
its heartbeat. `--slow-trial-s`: the first sampled (non-baseline) trial it runs takes that long.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from search.study import coordination
from search.study.coordination import Coordination
from search.study.events import StudyObserver, TrialStarted
from tests.support.scripted_executor import ScriptedCalibration, ScriptedExecutor
from tests.support.study_loop import runner

CALIBRATED = Path(__file__).resolve().parents[1] / "fixtures" / "scenarios" / "loop_calibrated.yaml"


def emit(**fields) -> None:
    print(json.dumps({"t": time.time(), **fields}), flush=True)


class Printer(StudyObserver):
    def note(self, text: str) -> None:
        emit(event="note", text=text)

    def trial_started(self, event: TrialStarted) -> None:
        emit(event="started", trial=event.number, baseline=event.baseline)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("runs_dir")
    ap.add_argument("trials", type=int)
    ap.add_argument("slot")
    ap.add_argument("--trial-s", type=float, default=0.5)
    ap.add_argument("--slow-trial-s", type=float, default=None)
    ap.add_argument("--host", default=None)
    ap.add_argument("--grace", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.host:
        coordination.socket.gethostname = lambda: args.host  # type: ignore[attr-defined]
    slow = {"left": args.slow_trial_s}

    def take_time(plan) -> None:
        if slow["left"] is not None and plan.baseline is None:
            emit(event="slow", trial=plan.number)
            time.sleep(slow["left"])
            slow["left"] = None
        else:
            time.sleep(args.trial_s)
        emit(event="ran", trial=plan.number, params=plan.params)

    calibration = ScriptedCalibration()

    def calibrate(*a):
        emit(event="calibrated")
        time.sleep(1.0)  # long enough for the other worker to arrive meanwhile
        return calibration(*a)

    r = runner(
        Path(args.runs_dir),
        ScriptedExecutor(before=take_time),
        scenario=CALIBRATED,
        trials=args.trials,
        observers=[Printer()],
        calibrate=calibrate,
        storage=args.url,
        coordination=Coordination(heartbeat_interval_s=1, grace_period_s=args.grace, poll_s=0.2, slot=args.slot),
        seed=args.seed,
    )
    r.run()
    emit(event="done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
