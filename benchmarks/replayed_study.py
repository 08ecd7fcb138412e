"""One replayed study for `make bench-search`, judged on the truth: a real study (`StudyRunner`:
SQLite for the tuner's tables, scoring, confirmation; Optuna's trials in memory) on the replay
executor (`search.replay`), its measured configs and its deployed one scored on the surrogate's
noiseless means against the landscape's best.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from objectives.scoring import score
from search import calibration as calibration_mod
from search import pareto
from search import scenario as scenario_mod
from search.prepare import StudyOptions, prepare
from search.replay import (
    CAPACITY,
    Landscape,
    Surrogate,
    replay_calibration,
    replay_context,
    replay_factory,
)
from search.study import LocalStorage, StudyRunner
from storage import queries

REPO = Path(__file__).resolve().parents[1]
CPU_LANDSCAPE = REPO / "benchmarks" / "data" / "landscape-mixed-cpu.json"  # recorded: benchmarks/bench_landscape.py
SYNTHETIC_LANDSCAPE = REPO / "benchmarks" / "data" / "landscape-mixed-synthetic.json"  # invented, for unit tests


@dataclass(frozen=True)
class World:
    """What every run of the bench is judged against: the landscape, its surrogate, the scenario
    and the reference front on the surrogate's means."""

    landscape: Landscape
    surrogate: Surrogate
    scenario: Any
    scenario_path: Path
    slos: tuple
    reference_point: tuple[float, ...]
    reference_hv: float
    best: dict[str, Any]  # the best feasible config by the scenario's rule, with its means

    def truth(self, config: dict[str, Any]) -> tuple[list[float], bool]:
        """A config's objective vector on the surrogate's means, and whether it truly meets the SLOs."""
        if not self.surrogate.serves(config):
            return [math.nan] * len(self.scenario.objectives), False
        s = score(self.surrogate.mean(config), self.scenario.objectives, list(self.slos), staged=True)
        return s.values, s.feasible


def _one_thread() -> None:
    """GP's torch on one thread per process: the bench already runs one process per core."""
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)


def _scenario_path(landscape: Landscape) -> Path:
    """The built-in scenario the landscape names, else the one it recorded, written where the
    replayed studies read it."""
    try:
        return scenario_mod.resolve_path(landscape.scenario)
    except scenario_mod.ScenarioError:
        if not landscape.scenario_source:
            raise
    source = landscape.replayable_source()
    path = Path(tempfile.gettempdir()) / f"autotune-{landscape.scenario}-{scenario_mod.digest(source)}.yaml"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        tmp.replace(path)
    return path


@lru_cache(maxsize=2)
def world(landscape_path: str) -> World:
    warnings.filterwarnings("ignore")
    _one_thread()
    landscape = Landscape.load(Path(landscape_path))
    surrogate = Surrogate.fit(landscape)
    path = _scenario_path(landscape)
    sc, _, _ = scenario_mod.load(path)
    _, slos, _ = calibration_mod.resolve(sc, calibration_mod.CalibrationResult.from_dict(landscape.calibration))
    configs = [c.config for c in landscape.configs]
    surrogate.prime(configs)
    partial = World(landscape, surrogate, sc, path, tuple(slos), (), 0.0, {})
    judged = [(c, *partial.truth(c)) for c in configs]
    feasible = [(c, v) for c, v, ok in judged if ok]
    values = [v for _, v in feasible]
    ref = tuple(max(v[i] for v in values) * 1.1 if d == "minimize" else 0.0 for i, d in enumerate(sc.directions))
    hv = pareto.hypervolume(values, sc.directions, ref)
    order = pareto.rank(values, sc.directions, sc.objective_names, sc.selection)
    best_config, best_values = feasible[order[0]]
    best = {"config": best_config, **dict(zip(sc.objective_names, best_values))}
    return World(landscape, surrogate, sc, path, tuple(slos), ref, hv, best)


def _capacity_index(w: World) -> int:
    return w.scenario.objective_names.index(CAPACITY)


WARM = "+warm"  # a row's suffix: the sampler warm-started from an earlier study (`run_study`)
PRIOR_BUDGET = 10


def _study(
    w: World,
    d: str,
    optuna_storage: LocalStorage,
    sampler: str,
    seed: int,
    budget: int,
    name: str,
    warm_start: str | None = None,
) -> StudyRunner:
    opts = StudyOptions(
        scenario=str(w.scenario_path),
        trials=budget,
        storage=f"sqlite:///{d}/bench.db",
        study_name=name,
        runs_dir=Path(d),
        seed=seed,
        sampler=sampler,
        warm_start=warm_start,
    )
    return StudyRunner(
        prepare(opts, ctx=replay_context(w.landscape)),
        opts,
        executor=replay_factory(w.surrogate, seed),
        calibrate=replay_calibration(w.landscape),
        storage=optuna_storage,
    )


def run_study(
    landscape_path: str, sampler: str, seed: int, budget: int, warm_from: str | None = None
) -> dict[str, Any]:
    """One study on the replay executor; what it measured and deployed, judged on the means.
    `sampler` + WARM: first an earlier study of the same sampler (PRIOR_BUDGET trials, its
    confirmation, other noise), then this one with `--warm-start` from it: what a user re-tuning
    on the same model, machine and build gets from the first study. The earlier study runs on
    `warm_from` where given (another landscape: another load, say), else on this one."""
    w = world(landscape_path)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    name = sampler.removesuffix(WARM)
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as d:
        warm_start = None
        trials = LocalStorage()  # Optuna's; the tuner's own tables are in the SQLite file under d
        if sampler.endswith(WARM):
            earlier = world(warm_from) if warm_from else w
            _study(earlier, d, trials, name, seed + 10_000, PRIOR_BUDGET, "earlier").run()
            warm_start = "earlier"
        runner = _study(w, d, trials, name, seed, budget, "bench", warm_start)
        t0, cpu0 = time.monotonic(), time.process_time()
        result = runner.run()
        seconds, cpu_s = time.monotonic() - t0, time.process_time() - cpu0
        with Session(runner.engine, expire_on_commit=False) as s:
            rows = queries.trial_records(s, queries.require_study(s, "bench"))
            measured = [(r.trial_number, r.config, r.baseline) for r in rows if r.counts_against_budget]
            deployed = next(((r.config, r.baseline) for r in rows if r.trial_number == result.chosen), None)
    curve, front = [], []
    for _, config, _ in measured:
        values, ok = w.truth(config)
        if ok:
            front.append(values)
        curve.append(pareto.hypervolume(front, w.scenario.directions, w.reference_point) / w.reference_hv)
    out = {
        "sampler": sampler,
        "seed": seed,
        "budget": budget,
        "seconds": seconds,
        "cpu_s": cpu_s,
        "curve": curve,
        "hv": curve[-1] if curve else 0.0,
        "deployed": None,
    }
    if deployed is not None:
        values, ok = w.truth(deployed[0])
        k = _capacity_index(w)
        best_cap = w.best[CAPACITY]
        baselines_best = max((w.truth(c)[0][k] for _, c, b in measured if b and w.truth(c)[1]), default=0.0)
        out["deployed"] = {
            "baseline": deployed[1],
            "feasible": ok,
            **{n: v for n, v in zip(w.scenario.objective_names, values)},
            "regret": 1 - values[k] / best_cap if ok else 1.0,
            "better_existed": best_cap > 1.1 * baselines_best,
        }
    return out
