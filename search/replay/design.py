"""Which configurations a landscape measures, and in what order: a space-filling design of the
search space (Optuna's QMC sampler, scrambled Sobol, seeded), and the repeats that give the
noise, run after the first pass in shuffled rounds so drift over time is not taken for a
difference between configurations."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from search.proposals import sobol_points
from search.space import Distribution


def space_filling(dists: Mapping[str, Distribution], n: int, seed: int) -> list[dict[str, Any]]:
    """`n` parameter sets spread over the space (Optuna's QMC sampler draws the first at random,
    then the scrambled Sobol sequence)."""
    return sobol_points(dists, n, seed, first_at_random=True)


def repeat_rounds(count: int, repeats: int, runs: int, seed: int, prefer: Sequence[int] = ()) -> list[list[int]]:
    """Indices (into the first pass's `count` configurations) re-measured in each later round:
    the same `repeats` configurations, spread over the first pass, each round in its own
    shuffled order; `runs` measurements each in all (the first pass included). `prefer`: indices
    repeated first (those an earlier landscape repeated, so the two compare), the rest drawn."""
    if repeats > count:
        raise ValueError(f"{repeats} repeated configurations of {count}")
    rng = random.Random(seed)
    first = list(dict.fromkeys(i for i in prefer if 0 <= i < count))[:repeats]
    rest = [i for i in range(count) if i not in first]
    chosen = sorted(first + rng.sample(rest, repeats - len(first)))
    rounds = []
    for _ in range(runs - 1):
        order = list(chosen)
        rng.shuffle(order)
        rounds.append(order)
    return rounds
