"""make bench-reconfigure: the A/B's verdict reads "within the noise" only when the reconfigured
runs measure what the fresh ones do, and gives none for a run too small to tell."""

from __future__ import annotations

import random

import pytest

from benchmarks.bench_reconfigure import FRESH, METRICS, RECONFIGURED, at_capacity_fraction, pooled_ratio, verdict
from search import calibration, scenario

CONFIGS = [f"c{i}" for i in range(7)]


def runs(shift: float, repeats: int = 3, configs=CONFIGS, seed: int = 3) -> list[dict]:
    """Each config at its own level with 5% run-to-run noise; the reconfigured arm `shift` off."""
    rng, out = random.Random(seed), []
    for i, config in enumerate(configs):
        for repeat in range(repeats):
            for arm, factor in ((FRESH, 1.0), (RECONFIGURED, 1.0 + shift)):
                level = 100.0 * (i + 1)
                metrics = {m: level * factor * rng.gauss(1.0, 0.05) for m in METRICS}
                out.append({"config": config, "repeat": repeat, "arm": arm, "ok": True, "metrics": metrics})
    return out


def test_the_same_measurement_on_both_arms_is_within_the_noise():
    assert verdict(runs(0.0), list(METRICS), CONFIGS, 3).startswith("within the noise")


def test_a_reconfigured_arm_that_reads_a_fifth_slower_is_not():
    said = verdict(runs(0.2), list(METRICS), CONFIGS, 3)
    assert said.startswith("NOT shown within the noise") and "pooled ratio off 1" in said
    ratio, low, high = pooled_ratio(runs(0.2), "tpot_p95_ms", CONFIGS, 3)
    assert 1.1 < low <= ratio <= high


def test_too_few_configurations_or_repeats_give_no_verdict():
    assert "no verdict" in verdict(runs(0.0, repeats=2), list(METRICS), CONFIGS, 2)
    assert "no verdict" in verdict(runs(0.0, configs=CONFIGS[:3]), list(METRICS), CONFIGS[:3], 3)


def test_a_metric_without_pairs_valued_on_both_arms_is_not_compared():
    """The configurations missed at the target in both arms but once: a capacity of 0 is no
    evidence either way, said as such, and no verdict of "within the noise" rests on it."""
    zero = runs(0.0)
    for r in zero:
        r["metrics"]["slo_capacity_rps"] = 0.0
    zero[1]["metrics"]["slo_capacity_rps"] = 3.4  # one reconfigured run met the target
    said = verdict(zero, list(METRICS), CONFIGS, 3)
    assert said.startswith("NOT shown within the noise")
    assert "not compared (fewer than 2 pairs valued on both arms): slo_capacity_rps" in said
    assert "pooled ratio off 1" not in said


def test_capacity_fraction_sets_the_target_load_the_calibration_resolves():
    """--capacity-fraction: a lower target, so that configurations meet the SLOs there and their
    capacity is compared at all."""
    sc, _, _ = scenario.load("mixed")
    cal = calibration.CalibrationResult(
        unloaded={
            "ttft_median_ms@short": 50.0,
            "ttft_median_ms@long": 500.0,
            "tpot_median_ms": 10.0,
            "ttft_median_ms": 80.0,
        },
        saturation={},
        capacity_rps=4.0,
        seconds=1.0,
    )
    workload, _, _ = calibration.resolve(at_capacity_fraction(sc, 0.25), cal)
    assert workload.arrival.rate == pytest.approx(1.0)
    assert at_capacity_fraction(sc, None) is sc
    assert calibration.resolve(sc, cal)[0].arrival.rate == pytest.approx(sc.workload.arrival.capacity_fraction * 4.0)
