"""A synthetic landscape of a scenario's space, in the recorded landscape's format: a plausible
function of the parameters with noise, standing in for the real measurements until they exist.

SYNTHETIC: the numbers below are invented to have the shapes seen on the 2-core CPU (capacity
rising with the batch and sequence limits up to a knee, long prefills without a threshold
stalling the short class's first tokens, a memory share too small to start), not measured.
"""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime
from typing import Any

from objectives.scoring import score
from search import calibration as calibration_mod
from search.calibration import CalibrationResult
from search.replay.design import repeat_rounds, space_filling
from search.replay.landscape import CAPACITY, Config, Landscape, ScreenedRun
from search.scenario import Scenario
from search.space import distribution
from serving import Hardware, unset_value

# What vLLM applies on the CPU for a flag the synthetic configurations leave unset.
CPU = Hardware(device="cpu", cpu_model="synthetic", cpu_cores=2, ram_gib=24)
CPU_DEFAULTS = {
    name: unset_value(name, CPU)
    for name in (
        "max_num_seqs",
        "max_num_batched_tokens",
        "memory_utilization",
        "scheduler_delay_factor",
        "long_prefill_token_threshold",
        "enable_prefix_caching",
    )
}
UNLOADED: dict[str, float | None] = {
    "ttft_median_ms@short": 71.0,
    "ttft_median_ms@long": 310.0,
    "ttft_median_ms": 143.0,
    "tpot_median_ms": 8.5,
    "tpot_median_ms@short": 8.4,
    "tpot_median_ms@long": 8.6,
    "itl_median_ms": 8.5,
    "e2el_median_ms": 820.0,
}
CALIBRATION = CalibrationResult(
    unloaded=UNLOADED, saturation={"request_throughput": 1.7}, capacity_rps=1.7, seconds=95.0, rounds=[]
)
MIN_MEMORY = 0.12  # below: the KV cache cannot hold one request (kv_insufficient)
NOISE = {"ttft": 0.12, "tpot": 0.08, "capacity": 0.10}  # log-scale standard deviations


def _sat(x: float, half: float) -> float:
    return x / (x + half)


def truth(p: dict[str, Any], target_rps: float) -> dict[str, float]:
    """The noiseless synthetic numbers of one effective config."""
    seqs, tokens = p["max_num_seqs"], p["max_num_batched_tokens"]
    delay, threshold, prefix = (
        p["scheduler_delay_factor"],
        p["long_prefill_token_threshold"],
        p["enable_prefix_caching"],
    )
    chunk = tokens if not threshold else min(tokens, threshold)
    stall = chunk / 1024  # how long a prefill holds the short requests back
    capacity = (
        3.6
        * _sat(seqs / 16, 0.3)
        * _sat(tokens / 1024, 0.25)
        * (1.08 if prefix else 1.0)
        * (1 - 0.4 * delay)
        * min(1.0, p["memory_utilization"] / 0.3)
        / (1 + 0.5 * max(0.0, stall - 0.5))
    )
    load = target_rps / capacity
    ttft = 280.0 * (1 + 0.6 * stall) * (1 + 1.5 * delay) * (0.85 if prefix else 1.0) * (1 + 0.8 * load**2)
    tpot = 8.5 * (2 + 6 * (tokens / 1024) * (0.5 if threshold else 1.0) + seqs / 32) * (1 + delay)
    return {"ttft_p95_ms@short": ttft, "tpot_p95_ms": tpot, "error_rate": 0.0, CAPACITY: capacity}


def _bracket(capacity: float, target_rps: float) -> tuple[float | None, float]:
    """The screening capacity search's bracket: rates on a factor-sqrt(2) grid from the target."""
    k = math.floor(math.log(capacity / target_rps) / math.log(math.sqrt(2)))
    low = target_rps * math.sqrt(2) ** k
    return (low if k >= 0 else None), low * math.sqrt(2)


def _measure(scenario: Scenario, p: dict[str, Any], run: int, rng: random.Random, target_rps: float) -> ScreenedRun:
    trial_s = 75.0 + 40.0 * rng.random()
    if p["memory_utilization"] < MIN_MEMORY:
        return ScreenedRun(run, served=False, failure_class="kv_insufficient", trial_s=25.0, start_s=25.0)
    t = truth(p, target_rps)
    metrics = {
        "ttft_p95_ms@short": t["ttft_p95_ms@short"] * math.exp(rng.gauss(0, NOISE["ttft"])),
        "tpot_p95_ms": t["tpot_p95_ms"] * math.exp(rng.gauss(0, NOISE["tpot"])),
        "error_rate": 0.0,
    }
    low, high = _bracket(t[CAPACITY] * math.exp(rng.gauss(0, NOISE["capacity"])), target_rps)
    metrics[CAPACITY] = math.sqrt(low * high) if low else 0.0
    _, slos, _ = calibration_mod.resolve(scenario, CALIBRATION)
    s = score(metrics, scenario.objectives, slos, staged=True)
    return ScreenedRun(
        run, True, None, s.values, metrics, s.constraints, s.feasible, low, high, trial_s, 25.0 + 5 * rng.random()
    )


def landscape(
    scenario: Scenario,
    baselines: dict[str, dict[str, Any]],
    n: int = 48,
    repeats: int = 12,
    runs: int = 3,
    seed: int = 0,
) -> Landscape:
    """The synthetic counterpart of `benchmarks/bench_landscape.py`: the same design, invented numbers."""
    dists = {k: distribution(k, d, scenario.name, CPU) for k, d in scenario.search_space.items()}
    fraction = scenario.workload.arrival.capacity_fraction
    assert fraction is not None  # the replayed scenarios load at a share of the capacity
    target = CALIBRATION.capacity_rps * fraction
    rng = random.Random(seed)
    configs = [Config(params, {**scenario.server.fixed, **params}) for params in space_filling(dists, n, seed)]
    configs += [Config({k: v for k, v in b.items() if k in dists}, dict(b), name) for name, b in baselines.items()]
    effective = [{k: c.config.get(k, CPU_DEFAULTS[k]) for k in dists} for c in configs]
    for c, p in zip(configs, effective):
        c.measurements.append(_measure(scenario, p, 1, rng, target))
    for round_ in repeat_rounds(n, repeats, runs, seed):
        for i in round_:
            configs[i].measurements.append(
                _measure(scenario, effective[i], len(configs[i].measurements) + 1, rng, target)
            )
    space = {k: d.model_dump(exclude_none=True, exclude_defaults=True) for k, d in scenario.search_space.items()}
    return Landscape(
        scenario=scenario.name,
        objectives=[o.model_dump() for o in scenario.objectives],
        slos=[s.metric for s in scenario.slos],
        space=space,
        defaults=dict(CPU_DEFAULTS),
        calibration=CALIBRATION.as_dict(),
        configs=configs,
        synthetic=True,
        provenance={
            "synthetic": "invented numbers (search/replay/synthetic.py), not a measurement",
            "seed": seed,
            "date": datetime.now(UTC).date().isoformat(),
            "command": f"python -m benchmarks.bench_landscape synthetic --seed {seed}",
            "server_starts": 0,
            "wall_s": 0.0,
        },
    )
