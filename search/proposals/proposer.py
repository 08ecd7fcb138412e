"""The diagnosis as a proposer: a sampler that, between the model-based sampler's proposals,
makes the move the last trials' bottleneck calls for (`rules`).

After each trial the loop stores the move its diagnosis calls for with it (`MOVE_ATTR`, set
before Optuna is told). Every other sampled trial, `DiagnosisProposer` takes the latest trial
whose move the space allows and that gives a configuration not tried yet, and proposes that
trial's searched values with the one knob moved; the trials in between, and every trial when
no move applies, come from the wrapped sampler, which is fitted on all of them alike. Enqueued
trials (baselines, a warm start's winner) are left as they are. The loop stores each
proposal's reason with its trial (`PROPOSAL_ATTR`) and shows it in the trial's label.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from search.proposals.delegating import DelegatingSampler
from search.proposals.proposal_rules import Move, Step
from search.space import Distribution, representable

MOVE_ATTR = "next_move"  # trial user attr: the move its diagnosis calls for (`Move.as_dict()`)
PROPOSAL_ATTR = "proposal"  # trial user attr: why the proposer proposed this trial
WARM_START_ATTR = "warm_start"  # trial user attr of a warm start's enqueued winner: whose winner it is
LOOK_BACK = 3  # the latest diagnosed trials a proposal may follow: older ones the search has moved on from
FIXED_PARAMS = "fixed_params"  # Optuna's system attr of an enqueued trial


@dataclass(frozen=True)
class Proposal:
    source: int  # the trial whose diagnosis it follows
    params: dict[str, Any]
    reason: str


def _snap(value: float, dist: IntDistribution | FloatDistribution) -> float | int:
    value = min(max(value, dist.low), dist.high)
    step = getattr(dist, "step", None)
    if step:
        value = dist.low + round((value - dist.low) / step) * step
    return round(value) if isinstance(dist, IntDistribution) else value


def moved(value: Any, dist: Distribution, direction: str) -> Any | None:
    """`value` one step `direction` within `dist`; None when it cannot move (at its bound, or
    already on for "enable"). Numbers double or halve on a log scale, else move a quarter of
    the range; ordered choices move to the next one. 0 is "off" for the threshold knobs: lowering
    never turns a knob off, and "enable" turns it on in the middle of its settings (the middle
    choice that is on; the geometric middle of a range). The middle, not the mildest: on the
    recorded CPU landscape a long-prefill threshold of 1024 missed the SLOs where 512 and 256 met
    them, and a 5-trial study starting at 512 deployed an infeasible config half as often
    (docs/search.md)."""
    if isinstance(dist, CategoricalDistribution):
        ordered = sorted(c for c in dist.choices if isinstance(c, (int, float)) and not isinstance(c, bool))
        if not ordered or value not in ordered:
            return None
        if direction == "enable":
            on = [c for c in ordered if c > 0]
            return on[(len(on) - 1) // 2] if value == 0 and on else None
        if direction == "raise":
            return next((c for c in ordered if c > value), None)
        return next((c for c in reversed(ordered) if 0 < c < value), None)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if direction == "enable":
        low = max(dist.low, 1)
        return _snap(math.sqrt(low * dist.high), dist) if value == 0 else None
    up = direction == "raise"
    if dist.log:
        new = value * 2 if up else value / 2
    else:
        new = value + (1 if up else -1) * (dist.high - dist.low) / 4
    new = _snap(new, dist)
    return None if new == value or (direction == "lower" and new <= 0 < value and dist.low == 0) else new


def _reason(source: int, move: Move, step: Step, old: Any, new: Any) -> str:
    return (
        f"trial {source} {move.bottleneck.replace('_', ' ')} ({step.why}): {step.direction} {step.param} {old} -> {new}"
    )


def propose(trials: Sequence[FrozenTrial], dists: dict[str, Distribution]) -> Proposal | None:
    """The move of the latest diagnosed trial (of the last `LOOK_BACK`) that the space allows
    and that proposes a configuration no trial has yet; None if there is none."""
    tried = [t.params for t in trials]
    diagnosed = [t for t in trials if t.state == TrialState.COMPLETE and t.user_attrs.get(MOVE_ATTR)]
    for t in sorted(diagnosed, key=lambda t: t.number, reverse=True)[:LOOK_BACK]:
        move = Move.from_dict(t.user_attrs[MOVE_ATTR])
        start = {k: v for k, v in {**move.at, **t.params}.items() if k in dists and representable(v, dists[k])}
        for step in move.steps:
            if step.param not in start:
                continue
            new = moved(start[step.param], dists[step.param], step.direction)
            params = {**start, step.param: new}
            if new is None or any(params.items() <= p.items() for p in tried):
                continue
            return Proposal(t.number, params, _reason(t.number, move, step, start[step.param], new))
    return None


class DiagnosisProposer(DelegatingSampler):
    """`base` for every other sampled trial; the diagnosis' move (`propose`) for the others,
    whenever one applies."""

    def __init__(self, base: BaseSampler, dists: dict[str, Distribution]):
        super().__init__(base)
        self.dists = dists
        self._proposals: dict[int, Proposal] = {}

    def proposal(self, number: int) -> Proposal | None:
        """What was proposed for trial `number` (None: the base sampler's, or enqueued)."""
        return self._proposals.get(number)

    def _after_a_proposal(self, trials: Sequence[FrozenTrial], number: int) -> bool:
        sampled = [t for t in trials if t.number < number and FIXED_PARAMS not in t.system_attrs]
        if not sampled:
            return False
        last = max(sampled, key=lambda t: t.number)
        return PROPOSAL_ATTR in last.user_attrs or last.number in self._proposals

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.base.before_trial(study, trial)
        if FIXED_PARAMS in trial.system_attrs:
            return
        trials = study.get_trials(deepcopy=False)
        if self._after_a_proposal(trials, trial.number):
            return
        if (p := propose(trials, self.dists)) is not None:
            self._proposals[trial.number] = p

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        p = self._proposals.get(trial.number)
        if p is None:
            return self.base.sample_relative(study, trial, search_space)
        rest = {k: d for k, d in search_space.items() if k not in p.params}
        values = self.base.sample_relative(study, trial, rest) if rest else {}
        return {**values, **{k: v for k, v in p.params.items() if k in search_space}}

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        p = self._proposals.get(trial.number)
        if p is not None and param_name in p.params:
            return p.params[param_name]
        return self.base.sample_independent(study, trial, param_name, param_distribution)


def proposal_reason(sampler: BaseSampler, number: int) -> str | None:
    """Why trial `number` was proposed, if a diagnosis proposed it."""
    p = sampler.proposal(number) if isinstance(sampler, DiagnosisProposer) else None
    return p.reason if p is not None else None


def origin(user_attrs: dict[str, Any]) -> str | None:
    """Where a trial's configuration came from, when not from the sampler's model or a baseline:
    a diagnosis' move, or an earlier study's winner (shown in its label, the report, the dashboard)."""
    if user_attrs.get(PROPOSAL_ATTR):
        return f"proposed: {user_attrs[PROPOSAL_ATTR]}"
    return user_attrs.get(WARM_START_ATTR)


def follows_diagnoses(sampler: BaseSampler) -> bool:
    """Whether the sampler reads the move each trial's diagnosis calls for (`MOVE_ATTR`)."""
    return isinstance(sampler, DiagnosisProposer)
