"""The samplers a study can use, by name: the CLI's `--sampler` choices come from here.

Each entry builds an Optuna sampler from the seed, the active space and the trial budget. Startup
and population sizes scale with the budget (a third of it, within Optuna's usual bounds), so a
10-trial CPU study still gets a model-guided phase.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution

from search.proposals import DiagnosisProposer

SamplerFactory = Callable[[int, dict[str, BaseDistribution], int], optuna.samplers.BaseSampler]
DEFAULT_SAMPLER = "tpe"


def _startup(budget: int) -> int:
    return max(3, min(10, budget // 3))


def _grid(dists: dict[str, BaseDistribution]) -> dict[str, list[Any]]:
    """Every categorical choice; three points per range: both ends and the (geometric) middle."""
    grid = {}
    for k, d in dists.items():
        if isinstance(d, CategoricalDistribution):
            grid[k] = list(d.choices)
            continue
        mid = math.sqrt(d.low * d.high) if d.log else (d.low + d.high) / 2
        mid = int(round(mid)) if isinstance(d, IntDistribution) else mid
        grid[k] = sorted({d.low, mid, d.high})
    return grid


SAMPLERS: dict[str, SamplerFactory] = {
    "tpe": lambda seed, dists, budget: optuna.samplers.TPESampler(seed=seed, n_startup_trials=_startup(budget)),
    "nsga2": lambda seed, dists, budget: optuna.samplers.NSGAIISampler(
        seed=seed, population_size=max(4, min(50, budget // 3))),
    "gp": lambda seed, dists, budget: optuna.samplers.GPSampler(seed=seed, n_startup_trials=_startup(budget)),
    "random": lambda seed, dists, budget: optuna.samplers.RandomSampler(seed=seed),
    "grid": lambda seed, dists, budget: optuna.samplers.GridSampler(_grid(dists), seed=seed),
    "diagnosis-tpe": lambda seed, dists, budget: DiagnosisProposer(  # search/proposals: every other trial
        optuna.samplers.TPESampler(seed=seed, n_startup_trials=_startup(budget)), dists),
}


def make_sampler(name: str, seed: int, dists: dict[str, BaseDistribution], budget: int) -> optuna.samplers.BaseSampler:
    try:
        factory = SAMPLERS[name]
    except KeyError:
        raise ValueError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}") from None
    return factory(seed, dists, budget)
