"""What a study says it will take, and holds itself to.

The plan, said once calibration has turned the scenario into requests and seconds on this machine
(each stage, a trial, the confirmation, the whole; within a wall-time budget, the trials that fit);
the pace the trials then measure, said again where it moved; the confirmation re-planned once the
baselines are screened; and, at the end, each figure beside what the study took. The loop
(`search.study.loop`) tells it what happened and asks it for the search's deadline; it decides
nothing about which trial runs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from search import trial_results
from search.scenario import Scenario
from search.study.baseline_stop import baseline_threshold, run_shares
from search.study.confirmation_estimate import rescreened_round_s
from search.study.cost import StudyCost, study_cost
from search.study.opening import OpenedStudy
from search.study.pace import TrialPace
from storage.tables import TrialRecord


class StudyPlanning:
    """A run's plan and its accounting. `confirm_runs` is the run's: a wall-time budget that
    cannot fit the confirmation beside a single trial sets it to 0 (and says so)."""

    def __init__(
        self,
        sc: Scenario,
        *,
        baselines: int,
        budget: int,
        confirm_runs: int,
        timeout_min: float | None,
        confirm_command: str,
        note: Callable[[str], None],
    ):
        self.sc = sc
        self.baselines = baselines
        self.budget = budget
        self.confirm_runs = confirm_runs
        self.timeout_min = timeout_min
        self.confirm_command = confirm_command  # what runs a dropped confirmation later
        self.note = note
        self.begun = time.monotonic()  # the wall-time budget (--timeout-min) counts from here
        self.deadline: float | None = None  # where the search stops for the confirmation to fit
        self.plan: StudyCost | None = None  # what the study said before its first trial
        self._planned_at = math.nan  # when it said so (time.monotonic)
        self._pace = TrialPace(math.nan)  # a trial's length here: the plan's, then the measured one
        self._pace_said = math.nan  # the trial length the study last said
        self._ran_before = 0  # the trials of `_pace` that an earlier run of the study measured
        self._rescreened_s = math.nan  # the study's length said again once the baselines' screens were in
        self._picked: tuple[str, float] | None = None  # the plan's case the baselines' screens picked, its length

    @property
    def candidates(self) -> int:
        return self.sc.confirmation.front + self.baselines

    def planned(
        self,
        opened: OpenedStudy,
        spent: int,
        ran_s: tuple[float, ...] = (),
        confirmed: tuple[float | None, ...] = (),
    ) -> StudyCost:
        """The study's plan on this machine, said before its first trial; within a wall-time
        budget, the trials that fit beside the confirmation (fewer than asked: said so). The plan
        sets the search's deadline; the trials' own pace decides how many run before it. A study
        resumed plans its trials at the mean length of those it ran (`ran_s`), not the model's,
        and its confirmation without the runs already stored (`confirmed`: each one's seconds,
        None where not known), the rest at their mean length, as the phase itself then paces them."""
        runs = max(self.candidates * self.confirm_runs - len(confirmed), 0)
        cost = study_cost(
            opened.screened,
            opened.full,
            opened.calibration,
            trials=max(self.budget - spent, 0),
            confirmation_runs=runs,
            gpu=opened.ctx.hardware.is_gpu,
            shares=run_shares(self.sc, self.baselines),
        )
        # A stored confirmation run follows the search: the baselines' screens are in.
        cost = cost.screened_baselines(self.baselines if confirmed else spent, self.baselines)
        self._pace, self._ran_before = TrialPace(cost.trial_s, ran_s), len(ran_s)
        if ran_s:
            self.note(self._pace.resumed_text())
            cost = replace(cost, trial_s=self._pace.expected_s)
        if runs and (took := [t for t in confirmed if t is not None]):
            measured = TrialPace(cost.confirmation_run_s, tuple(took))
            self.note(measured.resumed_text("a confirmation run", "stored"))
            cost = replace(cost, confirmation_run_s=measured.expected_s)
        if self.timeout_min:
            cost = self._within_budget(cost, spent)
        self._pace_said = cost.trial_s
        for line in cost.lines():
            self.note(line)
        self.plan, self._planned_at = cost, time.monotonic()
        return cost

    def _within_budget(self, cost: StudyCost, spent: int) -> StudyCost:
        assert self.timeout_min
        left_s = self.timeout_min * 60 - (time.monotonic() - self.begun)
        budgeted = cost.within(left_s)
        if budgeted.confirmation_dropped:
            self.note(
                f"the budget of {self.timeout_min:g} min does not fit the confirmation (about "
                f"{cost.confirmation_s / 60:.0f} min) beside a single trial: no confirmation in this run; "
                f"`{self.confirm_command}` runs it on what the search found"
            )
            self.confirm_runs = 0
        self._reserve(budgeted.cost.confirmation_s if math.isfinite(budgeted.cost.confirmation_s) else 0.0)
        if budgeted.trimmed:
            beside = (
                f"and the confirmation (about {budgeted.cost.confirmation_s / 60:.0f} min)"
                if budgeted.cost.confirmation_runs
                else "(no confirmation in this run)"
            )
            self.note(
                f"the budget of {self.timeout_min:g} min fits {budgeted.cost.trials} more trials {beside} "
                f"at the plan's {cost.trial_s / 60:.1f} min a trial: about {spent + budgeted.cost.trials} trials "
                f"instead of {self.budget}; the search goes on while the next trial fits at the pace its trials measure"
            )
        return budgeted.cost

    def _reserve(self, confirmation_s: float) -> float:
        """The search's deadline, set and returned: the budget's end, less `confirmation_s` kept
        for the confirmation."""
        assert self.timeout_min
        self.deadline = self.begun + self.timeout_min * 60 - confirmation_s
        return self.deadline

    def paced(self, took_s: float, spent: int) -> None:
        """A trial's length measured; where the mean moved more than a fifth from what the study
        last said, the study says again what the rest will take."""
        self._pace = self._pace.after(took_s)
        if spent >= self.budget or not self._pace.moved_from(self._pace_said):
            return
        left = max(self.budget - spent, 0)
        if self.deadline is not None:
            left = min(left, self._pace.trials_within(self.deadline - time.monotonic()))
        self.note(self._pace.text(left, ", then the confirmation" if self.confirm_runs else ""))
        self._pace_said = self._pace.expected_s

    def out_of_time(self) -> str | None:
        """Within a wall-time budget, where the next trial at the measured pace would run past the
        search's deadline: the line that stops the search; else None."""
        if self.deadline is None:
            return None
        left = self.deadline - time.monotonic()
        if self._pace.fits(left):
            return None
        expected = f", a trial about {self._pace.expected_s / 60:.1f} min here" if left > 0 else ""
        return f"wall-time budget reached: {max(left, 0) / 60:.1f} min left for the search{expected}"

    @property
    def awaits_screens(self) -> bool:
        """Whether the baselines' screens would still re-plan the confirmation (said once)."""
        plan = self.plan
        return (
            plan is not None
            and plan.confirmation is not None
            and bool(plan.confirmation_runs)
            and not math.isfinite(self._rescreened_s)
        )

    def rescreened(self, screens: Sequence[TrialRecord], opened: OpenedStudy, spent: int) -> None:
        """Once every baseline is screened (`screens`: their rows), the confirmation re-planned from
        their screens (`rescreened_round_s`) and the study's length said again: the plan's least
        certain part is whether the baselines meet the target, and the screens say. The trials
        left are priced at the plan's length of a trial, not at the pace measured so far: that
        pace is the baselines', fixed configurations whose length says nothing of the sampled
        ones' (a default study's two baselines took 4.8 min a trial where its sampled trials then
        took 3.1; in another, 0.9 where they took 2.7)."""
        plan = self.plan
        if not self.awaits_screens or len(screens) < self.baselines or not self.candidates:
            return
        assert plan is not None and plan.confirmation is not None
        self._picked = picked_case(plan, screens)
        round_s = rescreened_round_s(
            list(screens),
            opened.full,
            opened.screened,
            plan.confirmation,
            baseline_threshold(self.sc),
            self.sc.confirmation.front,
        )
        if round_s is None:
            return
        confirmation_s = plan.rescreened_confirmation_s(round_s, self.candidates)
        trials_left, room = max(self.budget - spent, 0), ""
        if self.deadline is not None:
            trials_left, room = self._rebudgeted(confirmation_s, plan.trial_s, trials_left)
        self._rescreened_s = plan.rescreened_s(
            time.monotonic() - self._planned_at, trials_left, round_s, self.candidates
        )
        self.note(
            f"the baselines' screens re-plan the confirmation: about {confirmation_s / 60:.0f} min for its "
            f"{plan.confirmation_runs} runs (the plan said {plan.confirmation_s / 60:.0f}){room}; the study about "
            f"{self._rescreened_s / 60:.0f} min in all (the plan said {plan.total_s / 60:.0f})"
        )

    def _rebudgeted(self, confirmation_s: float, trial_s: float, trials_left: int) -> tuple[int, str]:
        """Within a wall-time budget, the search's deadline moved to leave the re-planned
        confirmation its time, not the plan's blend of two cases the screens have now told apart:
        a confirmation shorter than the blend gives the search more trials, a longer one fewer.
        The trials left that fit at the plan's length of a trial, and the line that says so."""
        assert self.timeout_min
        deadline = self._reserve(confirmation_s)
        fit = min(trials_left, TrialPace(trial_s).trials_within(deadline - time.monotonic()))
        room = f"room for about {fit} more trials" if fit else "no room for another trial"
        return fit, f"; within the budget of {self.timeout_min:g} min the search has {room}"

    def kept(self, search: bool) -> None:
        """What the plan said beside what the search and the confirmation then took, and a trial
        beside the mean of those this run measured."""
        plan = self.plan
        took_s = time.monotonic() - self._planned_at
        if plan is None or not plan.total_s > 0 or not took_s > 0:  # NaN: a plan that could not be made
            return
        what = {(True, True): "the search and the confirmation", (True, False): "the search"}.get(
            (search, self.confirm_runs > 0), "the confirmation"
        )
        trials = self._pace.measured_s[self._ran_before :]  # this run's
        mean = TrialPace(math.nan, trials).expected_s
        per_trial = (
            f"; a trial: planned {plan.trial_s / 60:.1f} min, {len(trials)} took {mean / 60:.1f} "
            f"min on average ({mean / plan.trial_s - 1:+.0%})"
            if trials and plan.trial_s > 0
            else ""
        )
        said_again = against_it = ""
        if self._picked is not None:
            case, case_s = self._picked
            said_again = f", {case_s / 60:.0f} in the case the baselines' screens picked ({case})"
            against_it = f", {took_s / case_s - 1:+.0%}"
        if math.isfinite(self._rescreened_s):  # said again once the baselines were screened
            said_again += f", {self._rescreened_s / 60:.0f} once the baselines were screened"
            against_it += f", {took_s / self._rescreened_s - 1:+.0%}"
        self.note(
            f"the plan said about {plan.total_s / 60:.0f} min for {what}{said_again}; "
            f"it took {took_s / 60:.0f} min ({took_s / plan.total_s - 1:+.0%}{against_it}){per_trial}"
        )


def picked_case(plan: StudyCost, screens: Sequence[TrialRecord]) -> tuple[str, float] | None:
    """Which of the plan's two cases the baselines' `screens` picked, and the study's length in it:
    every baseline met the SLOs at the target, or none did (None: some did, some did not, or the
    plan gave no case)."""
    if plan.baseline_cases is None or plan.target is None or not plan.confirmation_runs or not screens:
        return None
    target = plan.target.rate * 0.999  # a screen met at the target stores the target's rate, to rounding
    met = [(c := trial_results.capacity_of(row)) is not None and (c.low or 0.0) >= target for row in screens]
    if all(met):
        return "they met the SLOs at the target", plan.total_if(plan.baseline_cases[1])
    if not any(met):
        return "they missed the SLOs at the target", plan.total_if(plan.baseline_cases[0])
    return None
