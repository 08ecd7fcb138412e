"""The study: Optuna's loop over trials, and what happens around it.

`loop` runs it (`StudyRunner`: the search, one trial at a time, the budget), `opening` opens it
for a run (its record checked, calibration, baselines, the SQLite lock), `recording` writes each
trial (score, diagnosis, row, Optuna, snapshot), `coordination` lets workers share it through
the database and rides out that database going away, `confirmation` re-measures the candidates
on fresh servers after the search (the loop starts it there; `candidates` says who,
`confirmation_estimate` what their runs will take, `baseline_stop` where a baseline's search
stops), `verdict` reads what those runs say, `events` is what the loop tells its subscribers (the terminal, the dashboard), `context`
what a run's helpers share, `attributes` writes what Optuna's study and trials hold, and
`errors` says why a study will not run. Other packages import the loop from here; outputs read
the pure `events` and `verdict` modules.
"""

from search.study.attributes import BUDGET_ATTR
from search.study.coordination import LocalStorage
from search.study.errors import StudyBusy, StudyMismatch, StudyStopped
from search.study.loop import MAX_CONSECUTIVE_LOAD_ERRORS, StudyResult, StudyRunner, vllm_executor
from search.study.opening import setup_changes

__all__ = [
    "BUDGET_ATTR",
    "MAX_CONSECUTIVE_LOAD_ERRORS",
    "LocalStorage",
    "StudyBusy",
    "StudyMismatch",
    "StudyResult",
    "StudyRunner",
    "StudyStopped",
    "setup_changes",
    "vllm_executor",
]
