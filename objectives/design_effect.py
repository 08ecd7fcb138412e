"""How much a stage's requests over an SLO's bound cluster: the design effect of their count.

Pure. A stage's verdict (`objectives.slo_verdict`) tests the share of a class's requests over the
bound as a binomial proportion, which holds for independent requests. Under load they are not
independent: a burst of arrivals, or a long prefill in front of them, delays the requests behind
it together, so the ones over a bound come in runs. On a real `mixed` study, whether a short
request was over its TTFT bound correlated with whether the one before it was (lag 1: median 0.33
over 18 stages, up to 0.69; 0 for independent requests; docs/results.md, "Clustered
exceedances"): a run is nearer one observation than several, and a screened stage cut after 58
short requests, 8 of them over and 4 of those in one run, was read as a decided miss with a
confidence its count did not carry.

The design effect is the factor by which the count's variance exceeds the binomial one,
Var(over) = deff * n p (1 - p). It is read from the runs of consecutive requests over the bound,
in the order they were sent: their size-weighted mean length, sum c^2 / sum c (the cluster-size
factor of a compound Poisson count), against what independent requests at the same share would
give by chance, (1 + p) / (1 - p). So 1 for independent requests, about the run length where runs
are bursts. Never below 1: fewer runs than chance is not more information. With fewer than two
requests over there are no runs to read, and the count is taken as it is.

The verdicts then use the effective sample size of Korn and Graubard (1998, "Confidence intervals
for proportions with small expected number of positive counts estimated from survey data"): the
exact interval of over / deff requests among known / deff.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass


def design_effect(outcomes: Sequence[bool]) -> float:
    """The design effect of the count of True in `outcomes` (each request over the bound or not,
    in send order)."""
    known = len(outcomes)
    over = sum(outcomes)
    if over < 2 or over >= known:
        return 1.0
    runs = [sum(1 for _ in group) for is_over, group in itertools.groupby(outcomes) if is_over]
    share = over / known
    weighted_run = sum(c * c for c in runs) / over
    return max(1.0, weighted_run * (1.0 - share) / (1.0 + share))


@dataclass(frozen=True)
class OverCount:
    """A stage's requests over an SLO's bound among those whose outcome is known, and the design
    effect of their runs (1: independent)."""

    over: int
    known: int
    deff: float = 1.0

    @classmethod
    def of(cls, outcomes: Sequence[bool]) -> OverCount:
        """From each known request's outcome (over the bound or not), in send order."""
        return cls(sum(outcomes), len(outcomes), design_effect(outcomes))
