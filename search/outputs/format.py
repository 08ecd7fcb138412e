"""How a number is written for people: one rule for every table, note, report and the load command."""

from __future__ import annotations

import math
from typing import Any

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
