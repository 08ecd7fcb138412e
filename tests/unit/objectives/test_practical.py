"""objectives.practical: a difference is a win or a loss only when it matters."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from objectives.capacity import SLO_CAPACITY_RPS
from objectives.practical import PracticalSpec, absolute_threshold, equal_text, family, practical_call


def test_a_tiny_difference_beyond_the_noise_is_equal():
    """+0.2% [+0.2, +1.4] on output throughput: its interval excludes 0, but it is well within
    the 5% that a throughput must move to matter."""
    assert practical_call(0.002, 0.002, 0.014, 3, "maximize", 0.05) == "equal"


def test_a_difference_past_the_threshold_with_an_interval_excluding_zero_wins_or_loses():
    assert practical_call(0.12, 0.04, 0.20, 3, "maximize", 0.05) == "win"
    assert practical_call(-0.30, -0.45, -0.10, 3, "minimize", 0.05) == "win"
    assert practical_call(0.30, 0.10, 0.45, 3, "minimize", 0.05) == "loss"


def test_an_interval_across_zero_or_a_small_point_reaching_past_the_threshold_is_a_tie():
    assert practical_call(0.10, -0.05, 0.25, 3, "maximize", 0.05) == "tie"  # may be none
    assert practical_call(0.03, 0.01, 0.12, 3, "maximize", 0.05) == "tie"  # real, size unsure


def test_a_single_run_a_side_is_a_tie():
    assert practical_call(0.5, 0.5, 0.5, 1, "maximize", 0.05) == "tie"


def test_thresholds_per_family_and_per_metric_from_the_scenario():
    spec = PracticalSpec(latency=0.1, metrics={"ttft_p95_ms@short": 0.2})
    assert spec.threshold("tpot_p95_ms") == 0.1
    assert spec.threshold("ttft_p95_ms@short") == 0.2
    assert spec.threshold("output_throughput") == 0.05
    assert spec.threshold(SLO_CAPACITY_RPS) == 0.05
    assert practical_call(0.08, 0.06, 0.1, 3, "maximize", spec.threshold("output_throughput")) == "win"
    assert practical_call(-0.08, -0.1, -0.06, 3, "minimize", spec.threshold("tpot_p95_ms")) == "equal"
    with pytest.raises(ValidationError):
        PracticalSpec(latency=1.5)
    with pytest.raises(ValidationError):
        PracticalSpec(lattency=0.1)


def test_metric_families():
    assert family("ttft_p95_ms@short") == "latency"
    assert family("slo_capacity_output_throughput") == "capacity"
    assert family("output_throughput@long") == "throughput"
    assert family("error_rate") == "error_rate"
    assert absolute_threshold("error_rate") == 0.005 and absolute_threshold(SLO_CAPACITY_RPS) == 0.0


def test_the_equal_text_says_the_threshold():
    assert equal_text(0.05) == "equal within 5%"
    assert equal_text(0.005, relative=False) == "equal within 0.005"


def test_the_confirmations_call_is_equal_below_the_threshold_where_it_was_a_win():
    """The verdict's call (`statistics.call`) on a RAG-like scenario's output throughput:
    +0.2% [+0.2, +1.4] over 3+3 runs was "better beyond the noise"; with the throughput
    family's 5% it is equal."""
    from objectives.statistics import Difference, call

    tiny = Difference(0.002, 0.002, 0.014, 3)
    assert call(tiny, "maximize") == "win"  # no threshold: beyond the noise is a win
    assert call(tiny, "maximize", PracticalSpec().threshold("output_throughput")) == "equal"
    assert call(Difference(0.3, 0.2, 0.4, 3), "maximize", 0.05) == "win"
