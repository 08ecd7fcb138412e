"""A space-filling start: a study's first sampled trials on a scrambled Sobol design of the whole
space, then the model-based sampler.

Optuna's model-based samplers start from i.i.d. random draws. At the 3 to 10 startup trials a
user pays for, random draws bunch: two of three can land in one corner and leave a knob's other
half unseen. The first `n` points of a scrambled Sobol sequence cover every knob's range evenly
(each of the first 2^k points falls in its own 1/2^k slice of every dimension).

Enqueued trials (the baselines, a warm start's winner) and the diagnosis' moves are not part of
the design and do not use up its points.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, create_trial

from search.proposals.delegating import DelegatingSampler
from search.proposals.proposer import FIXED_PARAMS
from search.space import Distribution


def sobol_points(
    dists: Mapping[str, Distribution], n: int, seed: int, *, first_at_random: bool = False
) -> list[dict[str, Any]]:
    """The first `n` points of a scrambled Sobol sequence over `dists` (Optuna's QMC sampler and
    its mapping of log, stepped and categorical dimensions). `first_at_random`: a random point,
    then `n - 1` Sobol points, as Optuna's QMC sampler draws on an empty study (the landscape's
    design was drawn so: a recorded landscape resumes on the same points)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.QMCSampler(
            qmc_type="sobol", scramble=True, seed=seed, warn_independent_sampling=False, warn_asynchronous_seeding=False
        )
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.create_study(sampler=sampler)
    finally:
        optuna.logging.set_verbosity(verbosity)
    # The QMC sampler takes its space from the first completed trial and draws that trial at
    # random: a placeholder trial gives it the space, so every point asked is a Sobol point.
    if not first_at_random:
        study.add_trial(
            create_trial(params={k: _any(d) for k, d in dists.items()}, distributions=dict(dists), value=0.0)
        )
    points = []
    for _ in range(n):
        trial = study.ask(dict(dists))
        points.append(dict(trial.params))
        study.tell(trial, 0.0)
    return points


def _any(d: Distribution) -> Any:
    return d.choices[0] if isinstance(d, CategoricalDistribution) else d.low


class SpaceFillingStart(DelegatingSampler):
    """The design's points, in order, for the sampled trials until each has run; `base` after
    them (and for trials that a wrapping sampler, the diagnosis proposer, fills itself)."""

    def __init__(self, base: BaseSampler, dists: dict[str, Distribution], n: int, seed: int):
        super().__init__(base)
        self.dists = dists
        self.points = sobol_points({k: d for k, d in dists.items() if not d.single()}, n, seed) if n > 0 else []
        self._chosen: tuple[tuple[int, int], dict[str, Any] | None] | None = None  # (study, trial): its point

    def point(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, Any] | None:
        """The design point of `trial`: the first not run by an earlier trial; None when the trial
        is enqueued or the design is done. Worked out once per trial (Optuna asks for every
        parameter), so a trial keeps the point it started with."""
        key = (study._study_id, trial.number)
        if self._chosen is not None and self._chosen[0] == key:
            return self._chosen[1]
        if FIXED_PARAMS in trial.system_attrs:
            chosen = None
        else:
            earlier = [t.params for t in study.get_trials(deepcopy=False) if t.number < trial.number]
            chosen = next((p for p in self.points if not any(p.items() <= e.items() for e in earlier)), None)
        self._chosen = (key, chosen)
        return chosen

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        if self.point(study, trial) is not None:
            return {k: d for k, d in self.dists.items() if not d.single()}
        return self.base.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        p = self.point(study, trial)
        if p is None:
            return self.base.sample_relative(study, trial, search_space)
        return {k: v for k, v in p.items() if k in search_space}

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        p = self.point(study, trial)
        if p is not None and param_name in p:
            return p[param_name]
        return self.base.sample_independent(study, trial, param_name, param_distribution)
