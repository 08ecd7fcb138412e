"""Objective vectors, normalized SLO constraints, penalties, metric-name validation."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from objectives.scoring import (
    LARGE_PENALTY,
    SERVER_OK,
    ObjectiveSpec,
    SLOSpec,
    penalty_values,
    score,
    validate_metric_names,
)

OBJ = [
    ObjectiveSpec(metric="ttft_p95_ms", direction="minimize"),
    ObjectiveSpec(metric="output_throughput", direction="maximize"),
]


def test_objective_vector_in_order():
    s = score({"ttft_p95_ms": 120.0, "output_throughput": 380.0}, OBJ)
    assert s.values == [120.0, 380.0] and s.constraints == {SERVER_OK: -1.0} and s.feasible


def test_constraints_are_normalized_and_positive_when_violated():
    slos = [
        SLOSpec(metric="ttft_p95_ms", max=100.0),
        SLOSpec(metric="output_throughput", min=400.0),
        SLOSpec(metric="error_rate", max=0.01),
    ]
    s = score({"ttft_p95_ms": 150.0, "output_throughput": 500.0, "error_rate": 0.0}, OBJ, slos)
    assert s.constraints == {
        "ttft_p95_ms<=100": pytest.approx(0.5),
        "output_throughput>=400": pytest.approx(-0.25),
        "error_rate<=0.01": pytest.approx(-1.0),
        SERVER_OK: -1.0,
    }
    assert not s.feasible
    ok = score({"ttft_p95_ms": 90.0, "output_throughput": 500.0, "error_rate": 0.0}, OBJ, slos)
    assert ok.feasible and all(v <= 0 for v in ok.constraints.values())


def test_nan_metric_violates_its_slo_and_takes_the_penalty_value():
    slos = [SLOSpec(metric="ttft_p95_ms", max=100.0)]
    s = score({"ttft_p95_ms": math.nan, "output_throughput": math.nan}, OBJ, slos, request_timeout_s=60)
    assert s.values == [60_000.0, 0.0]
    assert s.constraints["ttft_p95_ms<=100"] == 1.0 and not s.feasible
    never_served = score({}, OBJ, slos, request_timeout_s=60)
    assert never_served.values == [60_000.0, 0.0] and not never_served.feasible


def test_a_server_that_never_served_scores_penalties_whatever_it_measured():
    slos = [SLOSpec(metric="ttft_p95_ms", max=100.0)]
    s = score({"ttft_p95_ms": 50.0, "output_throughput": 900.0}, OBJ, slos, request_timeout_s=60, served=False)
    assert s.values == [60_000.0, 0.0]
    assert s.constraints == {"ttft_p95_ms<=100": 1.0, SERVER_OK: 1.0} and not s.feasible


def test_penalty_values():
    objs = [
        ObjectiveSpec(metric="e2el_p99_ms@long", direction="minimize"),
        ObjectiveSpec(metric="goodput", direction="maximize"),
        ObjectiveSpec(metric="error_rate", direction="minimize"),
    ]
    assert penalty_values(objs, 30.0) == [30_000.0, 0.0, LARGE_PENALTY]
    assert all(math.isfinite(v) for v in penalty_values(objs, 30.0))


def test_slo_needs_exactly_one_nonzero_bound():
    with pytest.raises(ValidationError, match="exactly one of max, min"):
        SLOSpec(metric="ttft_p95_ms")
    with pytest.raises(ValidationError, match="exactly one of max, min"):
        SLOSpec(metric="ttft_p95_ms", max=1, min=0.5)
    with pytest.raises(ValidationError, match="non-zero"):
        SLOSpec(metric="error_rate", max=0)
    with pytest.raises(ValidationError):
        ObjectiveSpec(metric="goodput", direction="maximise")


def test_metric_names_are_validated_with_the_allowed_list():
    validate_metric_names(["ttft_p95_ms", "goodput", "ttft_p99_ms@short", "server_preemptions"], ["short", "long"])
    with pytest.raises(ValueError) as e:
        validate_metric_names(["ttft_p95", "tpot_p95_ms@medium"], ["short", "long"])
    msg = str(e.value)
    assert "ttft_p95, tpot_p95_ms@medium" in msg
    assert "ttft_p95_ms" in msg and "server_kv_cache_usage_peak" in msg and "short, long" in msg
    with pytest.raises(ValueError, match="duration_s@short"):
        validate_metric_names(["duration_s@short"], ["short"])  # run-level, not per class
