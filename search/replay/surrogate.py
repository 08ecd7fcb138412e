"""Surrogates fitted on a landscape: one extremely-randomized forest per metric (on a log scale for positive
metrics), one classifier for whether a configuration serves at all, and the noise its repeats
measured. What the replay executor answers from, and how well it predicts held-out configs.

Capacity is an interval in the landscape: the fit over every stage's counts and its interval
(`objectives.capacity_fit.fit_capacity`), or in a landscape recorded before the fit the bracket (the highest
rate met, the lowest missed). Its model is fitted on the fit's estimate (the bracket's geometric
middle before), and a replayed capacity is drawn around the prediction with the repeats' spread,
its interval as wide as the landscape's typical one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import spearmanr
from sklearn.ensemble import ExtraTreesRegressor, RandomForestClassifier
from sklearn.model_selection import GroupKFold

from search.replay.landscape import CAPACITY, Landscape

TREES = 100
FOLDS = 5


def encode(landscape: Landscape, config: dict[str, Any]) -> list[float]:
    """A config as the models see it: each space parameter as the server runs it, a log-scaled
    range as its logarithm, a choice as its value (numbers, booleans) or its index."""
    row = []
    for name, value in landscape.effective(config).items():
        spec = landscape.space[name]
        if "choices" in spec and not all(isinstance(c, (int, float)) for c in spec["choices"]):
            value = spec["choices"].index(value) if value in spec["choices"] else -1
        value = float(value)
        row.append(math.log(value) if spec.get("log") and value > 0 else value)
    return row


@dataclass
class MetricModel:
    name: str
    log: bool  # fitted on log(value)
    forest: ExtraTreesRegressor
    noise_sd: float  # the repeats' pooled standard deviation, on the fitted scale

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The forest's mean prediction on the fitted scale, tree by tree: the same numbers as
        `forest.predict`, without its per-call thread pool (30 ms a call) and each tree's checks."""
        x = _tree_input(x)
        return np.mean([tree.tree_.predict(x)[:, 0] for tree in self.forest.estimators_], axis=0)

    def to_scale(self, values: np.ndarray) -> np.ndarray:
        return np.log(values) if self.log else values

    def from_scale(self, values: np.ndarray) -> np.ndarray:
        return np.exp(values) if self.log else values


def _tree_input(x: np.ndarray) -> np.ndarray:
    """Rows as a fitted tree's own predict takes them (what sklearn's predict checks and converts
    on every call, 5 ms per replayed configuration over the forests)."""
    return np.ascontiguousarray(x, dtype=np.float32)


def _target(m, metric: str) -> float | None:
    return m.capacity_point() if metric == CAPACITY else m.metrics.get(metric)


def _pooled_sd(groups: list[list[float]]) -> float:
    """The within-config standard deviation pooled over configs measured more than once."""
    sq, dof = 0.0, 0
    for g in groups:
        if len(g) > 1:
            sq += float(np.var(g, ddof=1)) * (len(g) - 1)
            dof += len(g) - 1
    return math.sqrt(sq / dof) if dof else 0.0


def _rows(landscape: Landscape, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features, targets, config index) of the served measurements that have the metric."""
    x, y, g = [], [], []
    for i, c in enumerate(landscape.configs):
        for m in c.measurements:
            v = _target(m, metric) if m.served else None
            if v is not None and math.isfinite(v):
                x.append(encode(landscape, c.config))
                y.append(v)
                g.append(i)
    return np.array(x, dtype=float), np.array(y, dtype=float), np.array(g)


def _forest(seed: int) -> ExtraTreesRegressor:
    """Extra trees: on the synthetic landscape they ranked held-out configs better than a random
    forest (capacity 0.75 vs 0.66) or a Matern GP (0.75 vs 0.54), at GP's level on TTFT."""
    return ExtraTreesRegressor(n_estimators=TREES, random_state=seed)


def fit_metric(landscape: Landscape, metric: str, seed: int = 0) -> MetricModel:
    x, y, g = _rows(landscape, metric)
    if len(y) == 0:
        raise ValueError(f"the landscape has no served measurement of {metric}")
    log = bool(np.all(y > 0))
    scaled = np.log(y) if log else y
    noise = _pooled_sd([list(scaled[g == i]) for i in np.unique(g)])
    return MetricModel(metric, log, _forest(seed).fit(x, scaled), noise)


def _bracket_ratio(landscape: Landscape) -> float:
    """How wide a typical measurement leaves the capacity (`ScreenedRun.capacity_ratio`)."""
    ratios = [r for _, m in landscape.measurements() if m.served and (r := m.capacity_ratio()) is not None]
    return float(np.median(ratios)) if ratios else 1.0


@dataclass
class Surrogate:
    landscape: Landscape
    models: dict[str, MetricModel]
    served: RandomForestClassifier | None  # None: every measured config served
    failure_class: str | None  # what a config that does not serve fails with
    bracket_ratio: float  # high / low of a typical capacity interval (the bracket, before the fit)
    fitted: bool = False  # the landscape recorded capacities fitted on every stage, with their intervals
    _cache: dict[tuple, tuple[dict[str, float], bool]] = field(default_factory=dict, repr=False)

    @classmethod
    def fit(cls, landscape: Landscape, seed: int = 0) -> Surrogate:
        names = list(dict.fromkeys(landscape.metric_names + landscape.slos))
        models = {n: fit_metric(landscape, n, seed) for n in names}
        pairs = landscape.measurements()
        labels = [m.served for _, m in pairs]
        served = None
        if len(set(labels)) > 1:
            x = np.array([encode(landscape, c.config) for c, _ in pairs])
            served = RandomForestClassifier(n_estimators=TREES, random_state=seed).fit(x, labels)
        failures = [m.failure_class for _, m in pairs if not m.served and m.failure_class]
        failure = max(set(failures), key=failures.count) if failures else None
        fitted = any(m.capacity_fit_low is not None for _, m in pairs)
        return cls(landscape, models, served, failure, _bracket_ratio(landscape), fitted)

    def prime(self, configs: Sequence[dict[str, Any]]) -> None:
        """Predict many configs in one call per model (a forest's call costs the same for 1 or 1000)."""
        keys = [k for k in dict.fromkeys(tuple(encode(self.landscape, c)) for c in configs) if k not in self._cache]
        if not keys:
            return
        x = np.array(keys)
        means = {n: m.from_scale(m.predict(x)) for n, m in self.models.items()}
        serves = self._serves(x)
        for i, key in enumerate(keys):
            self._cache[key] = ({n: float(v[i]) for n, v in means.items()}, bool(serves[i]))

    def _serves(self, x: np.ndarray) -> np.ndarray:
        """The classifier's vote (as `predict`, tree by tree: see `MetricModel.predict`)."""
        if self.served is None:
            return np.ones(len(x), dtype=bool)
        x = _tree_input(x)
        proba = np.mean([tree.tree_.predict(x)[:, : tree.n_classes_] for tree in self.served.estimators_], axis=0)
        return self.served.classes_[np.argmax(proba, axis=1)].astype(bool)

    def _predicted(self, config: dict[str, Any]) -> tuple[dict[str, float], bool]:
        self.prime([config])
        return self._cache[tuple(encode(self.landscape, config))]

    def serves(self, config: dict[str, Any]) -> bool:
        """Whether the config serves (deterministic: a start that fails for its memory fails every time)."""
        return self._predicted(config)[1]

    def mean(self, config: dict[str, Any]) -> dict[str, float]:
        """Each metric's predicted value (the geometric mean for log-fitted metrics)."""
        return dict(self._predicted(config)[0])

    def draw(self, config: dict[str, Any], rng: np.random.Generator) -> dict[str, float]:
        """One noisy measurement: each metric's mean moved by the repeats' spread."""
        out = {}
        for name, value in self.mean(config).items():
            m = self.models[name]
            scaled = m.to_scale(np.array([value]))[0] + rng.normal(0.0, m.noise_sd)
            out[name] = float(m.from_scale(np.array([scaled]))[0])
        return out


# -- held-out accuracy -----------------------------------------------------------------------


@dataclass(frozen=True)
class Accuracy:
    metric: str
    spearman: float  # rank correlation of predicted vs measured, configs held out
    median_rel_error: float  # |predicted - measured| / measured, median over held-out configs
    noise_rel: float  # the repeats' own spread, as a relative error (the floor)
    configs: int


def _grouped_folds(groups: np.ndarray) -> int:
    return min(FOLDS, len(np.unique(groups)))


def cross_validated(landscape: Landscape, seed: int = 0) -> tuple[list[Accuracy], float | None]:
    """Per metric, predictions for configs held out of the fit (grouped K-fold: a config's
    repeats stay together), compared by config to its measured mean; and the serve
    classifier's held-out accuracy (None when every config served)."""
    out = []
    for metric in dict.fromkeys(landscape.metric_names + landscape.slos):
        x, y, g = _rows(landscape, metric)
        if np.ptp(y) == 0:  # constant (error_rate 0 everywhere): nothing to rank
            continue
        log = bool(np.all(y > 0))
        scaled = np.log(y) if log else y
        pred = np.empty_like(scaled)
        for train, test in GroupKFold(n_splits=_grouped_folds(g)).split(x, scaled, g):
            pred[test] = _forest(seed).fit(x[train], scaled[train]).predict(x[test])
        configs = np.unique(g)
        measured = np.array([scaled[g == i].mean() for i in configs])
        predicted = np.array([pred[g == i].mean() for i in configs])
        back = np.exp if log else (lambda v: v)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.abs(back(predicted) - back(measured)) / np.abs(back(measured))
        rho = spearmanr(predicted, measured).statistic
        noise = _pooled_sd([list(scaled[g == i]) for i in configs])
        out.append(
            Accuracy(
                metric, float(rho), float(np.nanmedian(rel)), float(np.expm1(noise)) if log else noise, len(configs)
            )
        )
    return out, _classifier_accuracy(landscape, seed)


def _classifier_accuracy(landscape: Landscape, seed: int) -> float | None:
    x = np.array([encode(landscape, c.config) for c in landscape.configs])
    y = np.array([any(m.served for m in c.measurements) for c in landscape.configs])
    if len(set(y)) < 2:
        return None
    hits = 0
    for train, test in GroupKFold(n_splits=min(FOLDS, len(y))).split(x, y, np.arange(len(y))):
        if len(set(y[train])) < 2:
            hits += int(np.sum(y[test] == y[train][0]))
            continue
        clf = RandomForestClassifier(n_estimators=TREES, random_state=seed).fit(x[train], y[train])
        hits += int(np.sum(clf.predict(x[test]) == y[test]))
    return hits / len(y)
