"""What one `autotune worker` is asked to run, and what it takes from the study it joins.

A worker started by hand builds its `WorkerOptions` from its flags; `autotune search --workers N`
builds one per worker and hands it over whole, as one JSON argument (`app.workers.worker_argv`),
so the options are spelled out once, here, not again as a dozen flags between the processes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from search.disk import DEFAULT_RUNS_DIR
from search.prepare import StudyOptions
from search.study.coordination import DEFAULT_BOUND_S


@dataclass(frozen=True)
class JoinedStudy:
    """What a worker takes from the study it joins, unless told otherwise."""

    scenario: str  # a path: the stored scenario file, written under the runs directory
    model: str
    budget: int | None


class WorkerOptions(BaseModel):
    """One worker's options: the study it joins (`storage`, `study`) and, where given, what it
    runs instead of the study's own (None: the stored scenario, model and budget; the seed, the
    worker's process id). A model of its own: it crosses a process boundary as JSON, checked on
    the way in (an unknown field is refused, not dropped)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    storage: str
    study: str
    runs_dir: Path = DEFAULT_RUNS_DIR
    scenario: str | None = None
    model: str | None = None
    trials: int | None = None
    timeout_min: float | None = None
    sampler: str | None = None
    seed: int | None = None
    db_outage_s: int = DEFAULT_BOUND_S

    def study_options(self, joined: JoinedStudy) -> StudyOptions:
        """The study options the worker runs with: its own where given, else the joined study's.
        A worker runs no confirmation phase: the study's parent, or `autotune confirm`, does."""
        return StudyOptions(
            scenario=self.scenario or joined.scenario,
            trials=self.trials or joined.budget,
            timeout_min=self.timeout_min,
            model=self.model or joined.model,
            storage=self.storage,
            study_name=self.study,
            sampler=self.sampler,
            seed=self.seed if self.seed is not None else os.getpid(),
            runs_dir=self.runs_dir,
            confirm_runs=0,
        )
