"""The feasible Pareto front, its hypervolume, and the rule that picks one config from it."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from search.scenario import Scenario, Selection


def feasible(trial: FrozenTrial) -> bool:
    return all(v <= 0 for v in trial.constraints.values())


def front(study: optuna.Study) -> list[FrozenTrial]:
    """Optuna's own Pareto set; with constraints present it holds feasible trials only."""
    return list(study.best_trials)


def _as_loss(values: Sequence[float], directions: Sequence[str]) -> np.ndarray:
    return np.array([v if d == "minimize" else -v for v, d in zip(values, directions)], dtype=float)


def reference_point(values: Sequence[float], directions: Sequence[str]) -> list[float]:
    """Fixed once per study from the first measured trial, so hypervolumes stay comparable:
    twice its latency-like objectives, zero for maximized ones."""
    return [2.0 * v if d == "minimize" else 0.0 for v, d in zip(values, directions)]


def hypervolume(points: Sequence[Sequence[float]], directions: Sequence[str],
                reference: Sequence[float]) -> float:
    if not points:
        return 0.0
    # Private in Optuna 5 (no public hypervolume API); isolated here so one place changes if it moves.
    from optuna._hypervolume import compute_hypervolume

    ref = _as_loss(reference, directions)
    loss = np.array([_as_loss(p, directions) for p in points])
    loss = loss[np.all(loss <= ref, axis=1)]
    if len(loss) == 0:
        return 0.0
    return float(compute_hypervolume(loss, ref))


def select(members: Sequence[FrozenTrial], directions: Sequence[str], names: Sequence[str],
           rule: Selection) -> FrozenTrial | None:
    if not members:
        return None
    loss = np.array([_as_loss(t.values, directions) for t in members])
    if rule.rule == "knee":
        lo, hi = loss.min(axis=0), loss.max(axis=0)
        span = np.where(hi > lo, hi - lo, 1.0)
        dist = np.linalg.norm((loss - lo) / span, axis=1)
        return members[int(np.argmin(dist))]
    k = names.index(rule.metric)
    best = loss[:, k].min()
    slack = abs(best) * rule.tolerance
    candidates = [i for i in range(len(members)) if loss[i, k] <= best + slack]
    if rule.then is not None and len(candidates) > 1:
        j = names.index(rule.then)
        candidates.sort(key=lambda i: (loss[i, j], loss[i, k]))
    else:
        candidates.sort(key=lambda i: loss[i, k])
    return members[candidates[0]]


def chosen(study: optuna.Study, scenario: Scenario) -> FrozenTrial | None:
    """The trial the scenario's selection rule picks from the study's feasible front."""
    return select(front(study), scenario.directions, scenario.objective_names, scenario.selection)


def finished(study: optuna.Study) -> list[FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
