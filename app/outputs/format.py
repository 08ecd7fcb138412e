"""How a number is written for people: one rule for every table, note, report and the load command."""

from __future__ import annotations

import math
from typing import Any

from loadgen import MetricName
from objectives.practical import equal_text
from objectives.serving_cost import CostInterval
from objectives.statistics import Difference, Interval, ratio

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
    `3.70 req/s [3.56, 3.98]`; a single run has no interval: `412 ms (1 run)`. A value that is
    only a lower bound reads `at least 1,470 ms [...]`; a zero takes its precision from its bounds
    (`0 req/s [0, 0.89]`)."""
    if not math.isfinite(iv.value):
        return MISSING
    scale = iv.value or max((abs(x) for x in (iv.low, iv.high) if math.isfinite(x)), default=0.0)
    d = _decimals(scale, digits)
    point = ("at least " if iv.at_least else "") + f"{iv.value:,.{d}f}" + (f" {unit}" if unit else "")
    if iv.n < 2:
        return f"{point} ({iv.n} run)"
    return f"{point} [{iv.low:,.{d}f}, {iv.high:,.{d}f}]"


def fmt_bracket(low: float, high: float, digits: int = 3) -> str:
    """Where a run's capacity search left the true value: `[2.86, 4.04)` (met at 2.86, violated at
    4.04), `>= 4.04` (met at every rate tried), `< 0.89` (missed at every rate tried)."""
    if low > 0 and high > low:
        return f"[{fmt_value(low, digits)}, {fmt_value(high, digits)})"
    if low > 0:
        return f">= {fmt_value(low, digits)}"
    return f"< {fmt_value(high, digits)}" if high > 0 else "0"


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


def fmt_difference(diff: Interval, unit: str = "") -> str:
    """A difference as its kind says: relative in percent (`-69% [-71, -66]`), absolute in the
    metric's unit and labelled so (`+2.11 req/s [+1.92, +2.30] absolute, the reference is not
    positive`)."""
    if getattr(diff, "kind", "relative") == "relative" or not math.isfinite(diff.value):
        return fmt_relative(diff)
    scale = max((abs(x) for x in (diff.value, diff.low, diff.high) if math.isfinite(x)), default=0.0)
    d = _decimals(scale, 3)
    text = f"{diff.value:+,.{d}f}" + (f" {unit}" if unit else "")
    if diff.n >= 2 and math.isfinite(diff.low) and math.isfinite(diff.high):
        text += f" [{diff.low:+,.{d}f}, {diff.high:+,.{d}f}]"
    return text + " absolute (the reference is not positive)"


def fmt_ratio(diff: Difference) -> str | None:
    """A relative difference as a ratio of the medians: `3.0x [2.6, 3.6]` (None: not defined)."""
    r = ratio(diff) if isinstance(diff, Difference) else None
    if r is None:
        return None

    def x(v: float) -> str:
        return f"{v:.1f}" if v >= 0.1 else f"{v:.2g}"

    text = f"{x(r.value)}x"
    if r.n >= 2 and math.isfinite(r.low) and math.isfinite(r.high):
        text += f" [{x(r.low)}, {x(r.high)}]"
    return text


OPEN_END = "open"  # an end of a cost's interval that its capacity's does not bound


def _cost(c: CostInterval, digits: int, prefix: str, suffix: str) -> str:
    """A cost's interval comes from its capacity's, which spans the runs' search brackets. One run
    has no run-to-run interval, but its bracket still bounds where its capacity lies: shown, and
    said to be that alone."""
    d = _decimals(c.value, digits)
    point = ("at most " if c.at_most else "") + f"{prefix}{c.value:,.{d}f}{suffix}"

    def end(x: float | None) -> str:
        return OPEN_END if x is None else f"{x:,.{d}f}"

    interval = f"[{end(c.low)}, {end(c.high)}]"
    if c.n < 2:
        if {end(c.low), end(c.high)} == {end(c.value)}:
            return f"{point} ({c.n} run)"
        return f"{point} {interval} ({c.n} run: its capacity search's bracket alone)"
    return f"{point} {interval}"


def fmt_usd(c: CostInterval, digits: int = 3) -> str:
    """Dollars with their interval, to the value's precision: `$0.412 [0.381, 0.447]`. An end the
    capacity leaves unbounded reads `open`, and a cost from a capacity that was only a lower bound
    `at most $0.412 [open, 0.447]`; one run: `$0.412 [0.398, 0.447] (1 run: its capacity search's
    bracket alone)`, or `$0.412 (1 run)` where the bracket is a point."""
    return _cost(c, digits, "$", "")


def fmt_cost_ratio(c: CostInterval) -> str:
    """One cost over another with its interval, to two significant digits: `0.33x [0.28, 0.38]`."""
    return _cost(c, 2, "", "x")


CALL_WORDS = {
    "win": "better beyond the noise",
    "loss": "worse beyond the noise",
    "tie": "within the noise",
    "equal": "equal within what matters",
}


def call_words(call: str, threshold: float | None = None, relative: bool = True) -> str:
    """What a call says; "equal within 5%" where the threshold is known."""
    if call == "equal" and threshold:
        return equal_text(threshold, relative)
    return CALL_WORDS[call]


def comparison_line(
    metric: str,
    candidate: Interval,
    reference_name: str,
    reference: Interval,
    diff: Interval,
    call: str | None = None,
    threshold: float | None = None,
) -> str:
    """One objective of a candidate against a reference, confirmed: `ttft_p95_ms@short 412 ms
    [398, 431] vs vllm_defaults 1,310 ms [1,270, 1,365]: -69% [-71, -66], 3+3 runs` (`call`, a
    `objectives.statistics.Call`, adds what the interval says: `; better beyond the noise`, or
    `; equal within 5%` below the metric's practical `threshold`)."""
    unit = unit_of(metric)
    line = (
        f"{metric} {fmt_interval(candidate, unit=unit)} vs {reference_name} "
        f"{fmt_interval(reference, unit=unit)}: {fmt_difference(diff, unit)}, {candidate.n}+{reference.n} runs"
    )
    relative = not isinstance(diff, Difference) or diff.kind == "relative"
    if call == "tie" and diff.n == 1:  # no run-to-run noise measured: not called, not "within" it
        return line + "; not called (one run a side)"
    return line + (f"; {call_words(call, threshold, relative)}" if call else "")
