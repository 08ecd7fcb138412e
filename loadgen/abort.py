"""What a stage's abort check answers: the load run calls it and stops when it returns an `Abort`.

The rules that decide it live in `objectives.early_abort`; the load run knows only this shape.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from loadgen.records import RequestRecord
from loadgen.server_metrics import GaugeSample


@dataclass(frozen=True)
class Abort:
    """Why a stage stopped early, and by how much it is certain to miss (a lower bound on the
    normalized SLO violation, as `scoring.SLOSpec.violation`; NaN when no rule bounds it).
    `passed`: stopped because every SLO is very likely met (a capacity stage), not missed.
    `drain`: stop sending but let the requests in flight finish, so the run ends as one planned
    to end here would (its verdict is decided: the rest of the schedule would not change it)."""

    reason: str
    margin: float = math.nan
    metric: str | None = None  # the SLO's metric, and a certain lower bound on its final value
    value: float = math.nan
    passed: bool = False
    drain: bool = False


AbortCheck = Callable[[Sequence[RequestRecord], float, Sequence[GaugeSample]], "Abort | None"]
