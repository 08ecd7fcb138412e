"""The feasible Pareto front, its hypervolume, and the rule that picks one config from it."""

from __future__ import annotations

import math
from collections.abc import Container, Sequence

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from objectives.capacity import Front
from objectives.scoring import SERVER_OK, TARGET_COMPLETED
from search.scenario import Scenario, Selection

# A told trial's constraints are stored once, as Optuna's pre-5.0 positional list (this system
# attr): Optuna 5's samplers read it (`FrozenTrial.constraints`, keys "0".."n-1") and so does
# optuna-dashboard 0.21, which reads nothing else. Optuna merges that list with the named
# constraints of `Trial.set_constraint`, so storing both would show its samplers each constraint
# twice. The names, in the list's order, are this user attr beside it (`named_constraints`).
CONSTRAINT_LIST = "constraints"
CONSTRAINT_NAMES_ATTR = "constraint_names"


def constraint_attrs(constraints: dict[str, float]) -> tuple[list[str], list[float]]:
    """The names and the positional list a trial's constraints are stored as."""
    return list(constraints), [float(v) for v in constraints.values()]


def named_constraints(trial: FrozenTrial) -> dict[str, float]:
    """The trial's constraints by name: from the list and its names, as the study stores them, or
    Optuna's own named ones (a trial made by `create_trial(constraints=...)`)."""
    names, listed = trial.user_attrs.get(CONSTRAINT_NAMES_ATTR), trial.system_attrs.get(CONSTRAINT_LIST)
    if names is None or listed is None:
        return trial.constraints
    return dict(zip(names, listed, strict=True))


def feasible(trial: FrozenTrial) -> bool:
    return all(v <= 0 for v in trial.constraints.values())


def slo_miss(trial: FrozenTrial) -> float:
    """The trial's worst SLO violation, as a fraction of its bound (> 0: missed by that much; inf:
    it served nothing), leaving out the bookkeeping constraints (served, target stage completed)."""
    constraints = named_constraints(trial)
    if constraints.get(SERVER_OK, -1.0) > 0:
        return math.inf
    misses = [v for k, v in constraints.items() if k not in (SERVER_OK, TARGET_COMPLETED)]
    return max(misses, default=math.inf)


def front(study: optuna.Study) -> list[FrozenTrial]:
    """Optuna's own Pareto set; with constraints present it holds feasible trials only."""
    return list(study.best_trials)


def search_front(study: optuna.Study, sc: Scenario) -> Front:
    """The front as a screened trial's capacity search sees it (`objectives.capacity.Front`)."""
    names = sc.objective_names
    return Front(dict(zip(names, sc.directions)), tuple(dict(zip(names, t.values)) for t in front(study)))


def _as_loss(values: Sequence[float], directions: Sequence[str]) -> np.ndarray:
    return np.array([v if d == "minimize" else -v for v, d in zip(values, directions)], dtype=float)


def reference_point(values: Sequence[float], directions: Sequence[str]) -> list[float]:
    """Fixed once per study from the first measured trial, so hypervolumes stay comparable:
    twice its latency-like objectives, zero for maximized ones."""
    return [2.0 * v if d == "minimize" else 0.0 for v, d in zip(values, directions)]


def hypervolume(points: Sequence[Sequence[float]], directions: Sequence[str], reference: Sequence[float]) -> float:
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


def rank(
    values: Sequence[Sequence[float]], directions: Sequence[str], names: Sequence[str], rule: Selection
) -> list[int]:
    """Indices of `values` (objective vectors) from best to worst by the selection rule.

    best_of: those within `tolerance` of the best `metric`, by `then` (ties: by `metric`), then
    the rest by `metric`. knee: by distance to the ideal point, each objective scaled to the range."""
    if not len(values):
        return []
    loss = np.array([_as_loss(v, directions) for v in values])
    if rule.rule == "knee":
        lo, hi = loss.min(axis=0), loss.max(axis=0)
        span = np.where(hi > lo, hi - lo, 1.0)
        dist = np.linalg.norm((loss - lo) / span, axis=1)
        return sorted(range(len(values)), key=lambda i: dist[i])
    k = names.index(rule.metric)
    best = loss[:, k].min()
    slack = abs(best) * rule.tolerance
    inside = [i for i in range(len(values)) if loss[i, k] <= best + slack]
    outside = sorted((i for i in range(len(values)) if i not in inside), key=lambda i: loss[i, k])
    if rule.then is not None:
        j = names.index(rule.then)
        inside.sort(key=lambda i: (loss[i, j], loss[i, k]))
    else:
        inside.sort(key=lambda i: loss[i, k])
    return inside + outside


def select(
    members: Sequence[FrozenTrial], directions: Sequence[str], names: Sequence[str], rule: Selection
) -> FrozenTrial | None:
    order = rank([t.values for t in members], directions, names, rule)
    return members[order[0]] if order else None


def chosen(study: optuna.Study, scenario: Scenario, behind: Container[int]) -> FrozenTrial | None:
    """The trial the scenario's selection rule picks from the study's feasible front, leaving out
    members whose load client fell behind its schedule (`behind`: their trial numbers, as their
    rows say, `storage.queries.clients_behind`) unless every member's did (the outputs then
    warn): the server got less load than planned, so their numbers flatter them."""
    members = front(study)
    trusted = [t for t in members if t.number not in behind] or members
    return select(trusted, scenario.directions, scenario.objective_names, scenario.selection)


def finished(study: optuna.Study) -> list[FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
