"""The one number format of every output: tables, notes, the report, best.yaml and `autotune load`."""

import math

import numpy as np
import pytest

from search.outputs.format import fmt_value


@pytest.mark.parametrize("value, digits, expected", [
    (123.456, 3, "123"),
    (123.456, 4, "123.5"),
    (0.012345, 3, "0.0123"),
    (2.0, 3, "2"),
    (1234.5, 3, "1,234"),  # too large for 3 significant digits: whole, grouped, no exponent
    (12345.6, 4, "12,346"),
    (999.7, 3, "1,000"),  # rounds up past 3 digits: still no "1e+03"
    (np.float64(0.25), 3, "0.25"),
])
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
