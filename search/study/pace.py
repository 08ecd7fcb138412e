"""What a study's measured runs say the rest of it will take: a screened trial's length, and each
confirmation candidate's run, the plan's figure (`search.study.cost`) until runs have been
measured, then theirs. The plan cannot know how many trials will meet the target and search their
capacity (several times the length of a miss, which stops early), nor where a candidate's
capacity search will go; what ran here can."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class TrialPace:
    """What a screened trial takes on this machine: the plan's figure until trials have run, then
    the mean of those measured, server start and recording included (a resumed study's plan
    prices its confirmation runs still to do the same way, from those stored). The mean, not the median:
    what a budget spends is a sum of trials, and their lengths are bimodal (a miss at the target
    stops early, a pass goes on to search its capacity)."""

    planned_s: float
    measured_s: tuple[float, ...] = ()

    def after(self, seconds: float) -> TrialPace:
        return TrialPace(self.planned_s, (*self.measured_s, seconds))

    @property
    def expected_s(self) -> float:
        """NaN while nothing is measured and the plan could not size a trial (a closed loop)."""
        return sum(self.measured_s) / len(self.measured_s) if self.measured_s else self.planned_s

    def resumed_text(self, what: str = "a trial", done: str = "it ran") -> str:
        """What a resumed study says of the trials (or confirmation runs) it already ran, which
        its plan then takes."""
        return (
            f"{what} of this study took {self.expected_s / 60:.1f} min on average over the {len(self.measured_s)} "
            f"{done} (the model plans {self.planned_s / 60:.1f}): the plan takes the measured length"
        )

    def fits(self, left_s: float) -> bool:
        """Whether one more trial is expected to end within `left_s` seconds."""
        return left_s > 0 and not self.expected_s > left_s

    def trials_within(self, left_s: float) -> int:
        """How many more trials are expected to end within `left_s` seconds."""
        return max(0, math.floor(left_s / self.expected_s)) if self.expected_s > 0 else 0

    def moved_from(self, said_s: float) -> bool:
        """Whether the mean moved more than a fifth from the length last said (NaN: none said)."""
        return not abs(self.expected_s / said_s - 1) <= 0.2

    def text(self, trials_left: int, then: str = "") -> str:
        """What the rest of the search will take at this pace."""
        planned = f"; planned {self.planned_s / 60:.1f}" if math.isfinite(self.planned_s) else ""
        return (
            f"a trial here takes about {self.expected_s / 60:.1f} min (the mean of {len(self.measured_s)}{planned}): "
            f"about {trials_left} more trials, {trials_left * self.expected_s / 60:.0f} min{then}"
        )


@dataclass(frozen=True)
class ConfirmationPace:
    """What the confirmation's runs still to do will take: each candidate's run as planned
    (`planned_s`, by trial number) until one of its runs has been measured, then the mean of its
    measured runs. The plan of a candidate's first run is the least certain figure of a study
    (where a baseline's capacity lies below the target decides how long its stages at low rates
    take); its measured runs are the best figure for its next, though not a bound: a baseline on
    its SLO bound met at the target in 1.7 min in one round and searched down for 15 in the next
    (docs/results.md, "A default study with three confirmation runs")."""

    planned_s: dict[int, float]
    measured_s: dict[int, tuple[float, ...]] = field(default_factory=dict)

    def after(self, trial_number: int, seconds: float) -> ConfirmationPace:
        runs = (*self.measured_s.get(trial_number, ()), seconds)
        return replace(self, measured_s={**self.measured_s, trial_number: runs})

    def run_s(self, trial_number: int) -> float:
        """A run of the candidate: the mean of its measured runs, else its plan (NaN: none)."""
        runs = self.measured_s.get(trial_number)
        return sum(runs) / len(runs) if runs else self.planned_s.get(trial_number, math.nan)

    def left_s(self, todo: Sequence[int]) -> float:
        """The runs `todo` (a trial number per run), at each candidate's pace (NaN: one unknown)."""
        return sum(self.run_s(n) for n in todo)

    def text(self, todo: Sequence[int]) -> str | None:
        """`confirmation: 4 runs to go, about 52 min`; None when nothing is left or not known."""
        left = self.left_s(todo)
        if not todo or not math.isfinite(left):
            return None
        return f"confirmation: {len(todo)} run{'s' if len(todo) != 1 else ''} to go, about {left / 60:.0f} min"
