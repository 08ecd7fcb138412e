"""The samplers a study can use, by name: the CLI's `--sampler` choices come from here.

Each entry builds an Optuna sampler from the seed, the active space and the trial budget. Startup
and population sizes scale with the budget (a third of it, within Optuna's usual bounds), so a
10-trial CPU study still gets a model-guided phase.

GP and NSGA-II model the knobs jointly: they sample the scenario's whole space (`_WholeSpace`),
fitted on the trials that have every knob, and the study tells Optuna each baseline at the point
it runs at (`search.space.effective_params`), so baselines are ordinary points for them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from search.proposals import DiagnosisProposer, SpaceFillingStart
from search.space import Distribution

SamplerFactory = Callable[[int, dict[str, Distribution], int], optuna.samplers.BaseSampler]
DEFAULT_SAMPLER = "tpe"


def _startup(budget: int) -> int:
    return max(3, min(10, budget // 3))


def _grid(dists: dict[str, Distribution]) -> dict[str, list[Any]]:
    """Every categorical choice; three points per range: both ends and the (geometric) middle."""
    grid: dict[str, list[Any]] = {}
    for k, d in dists.items():
        if isinstance(d, CategoricalDistribution):
            grid[k] = list(d.choices)
            continue
        mid = math.sqrt(d.low * d.high) if d.log else (d.low + d.high) / 2
        mid = round(mid) if isinstance(d, IntDistribution) else mid
        grid[k] = sorted({d.low, mid, d.high})
    return grid


class _TrialsWithEveryParameter:
    """The study as a joint sampler sees it: its finished trials without a value on every
    dimension of the space (a baseline set outside a searched range) left out, everything else
    (storage, directions) the study's own."""

    def __init__(self, study: optuna.Study, dists: dict[str, Distribution]):
        self._study, self._dists = study, dists

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _fits(self, t: FrozenTrial) -> bool:
        return not t.state.is_finished() or all(t.distributions.get(k) == d for k, d in self._dists.items())

    def _get_trials(
        self, deepcopy: bool = True, states: Container[TrialState] | None = None, use_cache: bool = False
    ) -> list[FrozenTrial]:
        trials = self._study._get_trials(deepcopy=deepcopy, states=states, use_cache=use_cache)
        return [t for t in trials if self._fits(t)]

    def get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        return [t for t in self._study.get_trials(deepcopy=deepcopy, states=states) if self._fits(t)]

    @property
    def trials(self) -> list[FrozenTrial]:
        return self.get_trials()


class _WholeSpace:
    """A joint sampler (GP, NSGA-II) on the scenario's whole space from its first model-guided
    proposal, fitted on the trials that have every parameter. Optuna's own choice, the
    intersection of the completed trials' parameters, shrinks to nothing on one trial without a
    value for some dimension, and the sampler then draws at random without saying so."""

    def __init__(self, *args: Any, dists: dict[str, Distribution], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.dists = dists

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return {k: d for k, d in self.dists.items() if not d.single()}

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        # A mixin: the sampler it is mixed into (GP, NSGA-II) comes after it and has the method.
        return super().sample_relative(_TrialsWithEveryParameter(study, self.dists), trial, search_space)  # type: ignore[misc]


# Named as Optuna's: `--sampler gp` is Optuna's GP sampler, only held to the whole space.
class GPSampler(_WholeSpace, optuna.samplers.GPSampler):
    pass


class NSGAIISampler(_WholeSpace, optuna.samplers.NSGAIISampler):
    pass


def models_jointly(sampler: optuna.samplers.BaseSampler) -> bool:
    """Whether the sampler models the knobs together (a trial without every knob is lost to it)."""
    return isinstance(sampler, _WholeSpace)


def _sobol_tpe(seed: int, dists: dict[str, Distribution], budget: int) -> SpaceFillingStart:
    """TPE after a Sobol design as large as its startup (search/proposals/initial_design.py)."""
    return SpaceFillingStart(
        optuna.samplers.TPESampler(seed=seed, n_startup_trials=_startup(budget)), dists, _startup(budget), seed
    )


SAMPLERS: dict[str, SamplerFactory] = {
    "tpe": lambda seed, dists, budget: optuna.samplers.TPESampler(seed=seed, n_startup_trials=_startup(budget)),
    "nsga2": lambda seed, dists, budget: NSGAIISampler(
        seed=seed, population_size=max(4, min(50, budget // 3)), dists=dists
    ),
    "gp": lambda seed, dists, budget: GPSampler(seed=seed, n_startup_trials=_startup(budget), dists=dists),
    "random": lambda seed, dists, budget: optuna.samplers.RandomSampler(seed=seed),
    "grid": lambda seed, dists, budget: optuna.samplers.GridSampler(_grid(dists), seed=seed),
    "sobol-tpe": _sobol_tpe,
    "diagnosis-tpe": lambda seed, dists, budget: DiagnosisProposer(  # search/proposals: every other trial
        optuna.samplers.TPESampler(seed=seed, n_startup_trials=_startup(budget)), dists
    ),
    "diagnosis-sobol-tpe": lambda seed, dists, budget: DiagnosisProposer(_sobol_tpe(seed, dists, budget), dists),
}


def scenario_default(scenario: Any) -> str:
    """The sampler a study of `scenario` uses unless told otherwise: its `default_sampler`, chosen
    on the bench (docs/search.md), else the project's default."""
    return scenario.default_sampler or DEFAULT_SAMPLER


def make_sampler(name: str, seed: int, dists: dict[str, Distribution], budget: int) -> optuna.samplers.BaseSampler:
    try:
        factory = SAMPLERS[name]
    except KeyError:
        raise ValueError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}") from None
    return factory(seed, dists, budget)
