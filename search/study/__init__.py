"""The study: Optuna's loop over trials, and what happens around it.

`loop` runs it (`StudyRunner`: the search, one trial at a time, the budget), `coordination`
lets workers share it through the database, `confirmation` re-measures the candidates on fresh
servers after the search, `verdict` reads what those runs say, and `events` is what the loop
tells its subscribers (the terminal, the dashboard). Other packages import the loop from here;
outputs read the pure `events` and `verdict` modules.
"""

from search.study.loop import (BUDGET_ATTR, MAX_CONSECUTIVE_LOAD_ERRORS, StudyBusy, StudyMismatch, StudyResult,
                               StudyRunner, StudyStopped, setup_changes, vllm_executor)

__all__ = ["BUDGET_ATTR", "MAX_CONSECUTIVE_LOAD_ERRORS", "StudyBusy", "StudyMismatch", "StudyResult", "StudyRunner",
           "StudyStopped", "setup_changes", "vllm_executor"]
