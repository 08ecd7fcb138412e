"""How a number is written for people: one rule for every table, note, report and the load command."""

from __future__ import annotations

import math
from typing import Any

from objectives.load import MetricName
from objectives.statistics import Interval

MISSING = "n/a"


def fmt_value(v: Any, digits: int = 3, missing: str = MISSING) -> str:
    """A metric or parameter value as people read it.

    Floats get `digits` significant digits; a float too large for that is written whole, with
    thousands grouped (12,346, not 1.23e+04). Integers, booleans and strings are written as they
    are, so a parameter like max_num_batched_tokens=8192 can be pasted back. None, NaN and
    infinities (nothing measured) are written as `missing`.
    """
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return missing
    if isinstance(v, float):
        text = f"{v:.{digits}g}"
        return f"{v:,.0f}" if "e+" in text else text
    return str(v)


def unit_of(metric: str) -> str:
    """The unit a metric is measured in ("" for ratios and counts)."""
    name = MetricName.parse(metric)
    base = name.base
    if name.unit == "ms":
        return "ms"
    if base.endswith("_rps") or base in ("request_throughput", "goodput"):
        return "req/s"
    if base.endswith("throughput"):
        return "tok/s"
    return ""


def _decimals(v: float, digits: int) -> int:
    """Decimals that give `v` its `digits` significant digits (none for numbers that large)."""
    if v == 0:
        return 0
    return max(0, digits - 1 - math.floor(math.log10(abs(v))))


def fmt_interval(iv: Interval, digits: int = 3, unit: str = "") -> str:
    """A median with its interval, the bounds to the median's precision: `412 ms [398, 431]`,
    `3.70 req/s [3.56, 3.98]`; a single run has no interval: `412 ms (1 run)`."""
    if not math.isfinite(iv.value):
        return MISSING
    d = _decimals(iv.value, digits)
    point = f"{iv.value:,.{d}f}" + (f" {unit}" if unit else "")
    if iv.n < 2:
        return f"{point} ({iv.n} run)"
    return f"{point} [{iv.low:,.{d}f}, {iv.high:,.{d}f}]"


def fmt_percent(x: float, signed: bool = False, decimals: int | None = None) -> str:
    """A share as a percentage: 0.069 -> "6.9%", 0.69 -> "69%" (`signed`: "+69%")."""
    if x is None or not math.isfinite(x):
        return MISSING
    d = decimals if decimals is not None else (0 if abs(x) >= 0.1 else 1)
    return f"{x * 100:{'+' if signed else ''}.{d}f}%"


def fmt_relative(diff: Interval) -> str:
    """A relative difference with its interval, in percent: `-69% [-71, -66]`. One decimal when
    any number is under 10%, so a bound near 0 still shows on which side it lies."""
    if not math.isfinite(diff.value):
        return MISSING
    numbers = (diff.value, diff.low, diff.high)
    d = 0 if all(abs(x) >= 0.1 for x in numbers if math.isfinite(x)) else 1
    text = fmt_percent(diff.value, signed=True, decimals=d)
    if diff.n < 2 or not (math.isfinite(diff.low) and math.isfinite(diff.high)):
        return text
    return f"{text} [{diff.low * 100:+.{d}f}, {diff.high * 100:+.{d}f}]"


CALL_WORDS = {"win": "better beyond the noise", "loss": "worse beyond the noise", "tie": "within the noise"}


def comparison_line(metric: str, candidate: Interval, reference_name: str, reference: Interval,
                    diff: Interval, call: str | None = None) -> str:
    """One objective of a candidate against a reference, confirmed: `ttft_p95_ms@short 412 ms
    [398, 431] vs vllm_defaults 1,310 ms [1,270, 1,365]: -69% [-71, -66], 3+3 runs` (`call`, a
    `objectives.statistics.Call`, adds what the interval says: `; better beyond the noise`)."""
    unit = unit_of(metric)
    line = (f"{metric} {fmt_interval(candidate, unit=unit)} vs {reference_name} "
            f"{fmt_interval(reference, unit=unit)}: {fmt_relative(diff)}, {candidate.n}+{reference.n} runs")
    return line + (f"; {CALL_WORDS[call]}" if call else "")
