"""The price of the serving hardware a study quotes its costs at: the scenario's
`cost.usd_per_hour`, or a run's `autotune search --usd-per-hour`, which wins.

The flag's price is kept with the study, as an Optuna study user attribute
(`search.study.attributes.keep_price`), when the run opens it: `autotune export`, the report and
the dashboard read the study back from storage and then quote the same figures as the run's own
summary, and a later run without the flag keeps it. A
user attribute rather than a column of `autotune_studies`, because a new column would make every
database an earlier build made unreadable (storage refuses another schema, never migrates) for
a number that is no measurement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from search.scenario import Scenario
from search.study.attributes import PRICE_ATTR

FROM_FLAG = "--usd-per-hour"
FROM_SCENARIO = "the scenario's cost.usd_per_hour"


@dataclass(frozen=True)
class Price:
    usd_per_hour: float
    source: str  # where it was set, as the outputs say it (FROM_FLAG, FROM_SCENARIO)


def study_price(scenario: Scenario, user_attrs: Mapping[str, Any]) -> Price | None:
    """The price the study's outputs quote: a run's --usd-per-hour, else the scenario's; None
    without either (the outputs then quote no cost)."""
    kept = user_attrs.get(PRICE_ATTR)
    if isinstance(kept, (int, float)) and math.isfinite(kept) and kept > 0:
        return Price(float(kept), FROM_FLAG)
    if scenario.cost is not None:
        return Price(scenario.cost.usd_per_hour, FROM_SCENARIO)
    return None
