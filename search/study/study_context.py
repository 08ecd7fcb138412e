"""What one run of a study works with, built once by the loop and handed to its helpers
(`Opening`, `Recording`, and through the recording the confirmation phase)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import optuna
from sqlalchemy.engine import Engine

from search.prepare import Prepared
from search.scenario import Scenario
from search.study import coordination as coord
from search.study.attributes import TrialAttributes
from search.study.events import StudyObserver


@dataclass(frozen=True)
class StudyContext:
    """The study `prep` names, as this run (`worker`) reaches it: our tables on `engine`,
    Optuna's `study` on `storage`, shared with other workers as `coordination` says, every step
    that touches the database ridden out by `watch`; what happens told to `events`, and what
    Optuna's trials hold besides the constraints written as `attributes` says."""

    prep: Prepared
    engine: Engine
    study: optuna.Study
    storage: coord.StudyStorage
    coordination: coord.Coordination
    watch: coord.DatabaseWatch
    worker: coord.WorkerId
    events: StudyObserver
    attributes: TrialAttributes

    @property
    def scenario(self) -> Scenario:
        return self.prep.scenario

    @property
    def run_dir(self) -> Path:
        return self.prep.run_dir
