"""An earlier study's trials as prior knowledge for the sampler, never as trials of this one.

`PriorSampler` gives its TPE sampler a view of the study that holds the earlier study's
completed trials (`prior_trials`: on this study's space) beside this study's own: an in-memory
Optuna study, refreshed with this study's completed trials before each proposal. TPE fits its
densities on that union, and leaves its random startup as soon as the union holds enough trials.
Nothing is written to this study's storage: the earlier values inform where to look, and every
configuration proposed is measured again.

TPE only: it reads nothing but the trials it is given. Optuna's GP sampler writes what it proposed
into the storage of the study it is handed and NSGA-II keeps its generations there, so with
those the warm start enqueues the earlier winner and adds no prior (`takes_prior`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, TPESampler
from optuna.trial import FrozenTrial, TrialState, create_trial

from search.pareto import named_constraints
from search.proposals.delegating import DelegatingSampler
from search.proposals.initial_design import SpaceFillingStart
from search.proposals.proposer import DiagnosisProposer
from search.space import Distribution, representable


def prior_trials(trials: Sequence[FrozenTrial], dists: dict[str, Distribution]) -> list[FrozenTrial]:
    """The earlier study's completed trials on this study's space: those whose values of every
    searched knob it would accept (parameters it no longer searches are dropped; a trial with a
    value outside the current range, or without a searched knob, a baseline's, is left out)."""
    kept = []
    for t in trials:
        if t.state != TrialState.COMPLETE or not all(
            k in t.params and representable(t.params[k], d) for k, d in dists.items()
        ):
            continue
        kept.append(
            create_trial(
                params={k: t.params[k] for k in dists},
                distributions=dict(dists),
                values=t.values,
                constraints=named_constraints(t),
            )
        )
    return kept


class PriorSampler(DelegatingSampler):
    """`base` (a TPE sampler) fitted on the `prior` trials and this study's completed ones."""

    def __init__(self, base: TPESampler, prior: Sequence[FrozenTrial], directions: Sequence[Any]):
        super().__init__(base)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._view = optuna.create_study(directions=list(directions))
        self._view.add_trials(prior)
        self.prior = len(prior)
        self._seen: set[int] = set()

    def _union(self, study: optuna.Study) -> optuna.Study:
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if t.number not in self._seen:
                self._view.add_trial(t)
                self._seen.add(t.number)
        return self._view

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.base.infer_relative_search_space(self._union(study), trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return self.base.sample_relative(self._union(study), trial, search_space)

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        return self.base.sample_independent(self._union(study), trial, param_name, param_distribution)


def takes_prior(sampler: BaseSampler) -> bool:
    """Whether `with_prior` can give the sampler a prior (its model-based part is TPE)."""
    while isinstance(sampler, (DiagnosisProposer, SpaceFillingStart)):
        sampler = sampler.base
    return isinstance(sampler, TPESampler)


def with_prior(sampler: BaseSampler, prior: Sequence[FrozenTrial], directions: Sequence[Any]) -> BaseSampler:
    """The sampler, its TPE part fitted on `prior` too (the proposer's moves follow this study's
    own diagnoses only; a space-filling start gives way to the prior, which already tells TPE
    where to look); as it is when it `takes_prior` not."""
    if not prior or not takes_prior(sampler):
        return sampler
    if isinstance(sampler, DiagnosisProposer):
        return DiagnosisProposer(with_prior(sampler.base, prior, directions), sampler.dists)
    if isinstance(sampler, SpaceFillingStart):
        return with_prior(sampler.base, prior, directions)
    assert isinstance(sampler, TPESampler)  # `takes_prior`: what the wrappers wrap is TPE
    return PriorSampler(sampler, prior, directions)
