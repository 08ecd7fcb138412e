"""The one number format of every output: tables, notes, the report, best.yaml and `autotune load`."""

import math

import numpy as np
import pytest

from app.outputs.format import comparison_line, fmt_interval, fmt_percent, fmt_relative, fmt_value, unit_of
from objectives.capacity import SLO_CAPACITY_RPS
from objectives.statistics import Interval


@pytest.mark.parametrize(
    "value, digits, expected",
    [
        (123.456, 3, "123"),
        (123.456, 4, "123.5"),
        (0.012345, 3, "0.0123"),
        (2.0, 3, "2"),
        (1234.5, 3, "1,234"),  # too large for 3 significant digits: whole, grouped, no exponent
        (12345.6, 4, "12,346"),
        (999.7, 3, "1,000"),  # rounds up past 3 digits: still no "1e+03"
        (np.float64(0.25), 3, "0.25"),
    ],
)
def test_floats_get_significant_digits_and_no_exponent_when_large(value, digits, expected):
    assert fmt_value(value, digits=digits) == expected


def test_integers_and_strings_are_written_as_they_are():
    # parameters must read back exactly: max_num_batched_tokens=8192, not 8,192 or 8.19e+03
    assert fmt_value(8192) == "8192"
    assert fmt_value(123456, digits=4) == "123456"
    assert fmt_value(True) == "True"
    assert fmt_value("auto") == "auto"


@pytest.mark.parametrize("value", [None, math.nan, math.inf, -math.inf])
def test_nothing_measured_is_written_as_missing(value):
    assert fmt_value(value) == "n/a"
    assert fmt_value(value, missing="") == ""
    assert fmt_value(value, missing="-") == "-"


# --- confirmed numbers: medians with their intervals, relative differences, one comparison line ----


def test_a_comparison_line_quotes_both_intervals_the_difference_and_the_run_counts():
    line = comparison_line(
        "ttft_p95_ms@short",
        Interval(412.3, 398.1, 431.2, 3),
        "vllm_defaults",
        Interval(1310.2, 1270.4, 1365.0, 3),
        Interval(-0.686, -0.712, -0.664, 3),
    )
    assert line == (
        "ttft_p95_ms@short 412 ms [398, 431] vs vllm_defaults 1,310 ms [1,270, 1,365]: -69% [-71, -66], 3+3 runs"
    )
    tie = comparison_line(
        "output_throughput",
        Interval(100.0, 98.0, 102.0, 3),
        "vllm_defaults",
        Interval(100.0, 98.0, 102.0, 2),
        Interval(0.0, -0.039, 0.041, 2),
        "tie",
    )
    assert tie.endswith("100 tok/s [98, 102]: +0.0% [-3.9, +4.1], 3+2 runs; within the noise")


@pytest.mark.parametrize(
    "metric, unit",
    [
        ("ttft_p95_ms@short", "ms"),
        (SLO_CAPACITY_RPS, "req/s"),
        ("request_throughput", "req/s"),
        ("output_throughput", "tok/s"),
        ("total_token_throughput", "tok/s"),
        ("error_rate", ""),
    ],
)
def test_units_follow_the_metric_name(metric, unit):
    assert unit_of(metric) == unit


def test_an_interval_keeps_the_medians_precision_and_a_single_run_says_so():
    assert fmt_interval(Interval(3.7, 3.56, 3.98, 3), unit="req/s") == "3.70 req/s [3.56, 3.98]"
    assert fmt_interval(Interval(412.0, 412.0, 412.0, 1), unit="ms") == "412 ms (1 run)"
    assert fmt_interval(Interval(math.nan, math.nan, math.nan, 0)) == "n/a"


def test_a_small_difference_keeps_a_decimal_so_its_side_of_zero_shows():
    assert fmt_relative(Interval(-0.02, -0.041, 0.003, 3)) == "-2.0% [-4.1, +0.3]"
    assert fmt_relative(Interval(0.25, 0.12, 0.4, 3)) == "+25% [+12, +40]"
    assert fmt_percent(0.07) == "7.0%" and fmt_percent(0.25) == "25%"
