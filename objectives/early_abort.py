"""Stop a load stage as soon as its SLO verdict is certain.

Pure: a rule looks at the requests sent so far and says whether the stage has already lost.

* A percentile bound or an error-rate bound is lost once enough of the stage's planned requests
  are over it that the full stage must miss it (the rules per SLO, `objectives.abort_rules`).
* The server's waiting queue growing without bound (`objectives.saturation.queue_runaway`: an
  open loop above capacity never reaches a steady state; a burst's queue drains, this one does not).

Four ways to run a stage (`STOP_RULES`, the scenario's `capacity.early_abort`):

* `certain`: the rules above only.
* `likely`: the rules above, then a stage also stops once a verdict is at least
  `LIKELY` (95 %) probable given what is measured so far (`objectives.likely_stop`): a likely
  miss of any SLO, or on a capacity stage a likely pass of every one.
  And over-saturation, its own reason (`objectives.saturation.over_saturated`): the waiting queue
  and the TTFT of the requests sent over the last window both climbing, beyond a burst's: the
  rate is above capacity and the stage is measuring its own backlog (as GuideLLM's
  over-saturation stop reads it).
* `decided` (the default): the certain rules, queue runaway and over-saturation as above (the
  certain percentile rule on a target stage only: a capacity stage's counts enter the capacity
  fit, and that rule's cut falls on a run of requests over the bound), and
  the stage's verdict (`objectives.slo_verdict`): at each of the stage's looks
  (`slo_verdict.StageLength`: every slice of its length), each counted SLO is a Clopper-Pearson
  decision on the share of its requests over the bound (failed requests over, requests in
  flight once certainly over; in runs, counted as fewer, `objectives.design_effect`), at the
  scenario's confidence with Bonferroni's correction over the looks. A decided violation stops the stage at any look (a miss, its requests in flight
  cut short); from the nominal length on, a look where no SLO is left undecided that the cap
  could still decide stops the sending and lets the requests in flight finish (`Abort.drain`:
  the stage is the one planned to end there, not a cut one). A stage planned to its cap runs on
  while an SLO is undecided. It replaces `likely` as the default: where the likely rule
  predicts the full stage's verdict from its first part (and stops a capacity stage as a
  likely pass at half its length), this one states a decision about the proportion with a
  stated error rate, never calls a pass before the nominal length, and lengthens a stage
  that cannot tell instead of guessing.
* `off`: nothing stops a stage.

Here, in that order: the decided rule and `abort_check` (the check a load run calls, running the
rules of the stage's stopping mode). A recorded stage asked again is `objectives.stage_replay`'s.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from loadgen import Abort, AbortCheck, GaugeSample, RequestRecord
from objectives.abort_rules import AbortRule, ErrorRateRule, PercentileRule, rules_for
from objectives.design_effect import OverCount
from objectives.likely_stop import likely_verdict
from objectives.saturation import over_saturated, queue_runaway
from objectives.scoring import SLOSpec
from objectives.slo_verdict import (
    DEFAULT_CONFIDENCE,
    VIOLATED,
    StageLength,
    counted_verdict,
    stage_passed,
    stop_reason,
)

__all__ = [
    "CERTAIN",
    "DECIDED",
    "LIKELY",
    "OFF",
    "STOP_RULES",
    "Abort",
    "abort_check",
    "decided_verdict",
]

# The four ways to run a stage (the module docstring; the scenario's `capacity.early_abort`).
DECIDED, LIKELY, CERTAIN, OFF = "decided", "likely", "certain", "off"
STOP_RULES = (DECIDED, LIKELY, CERTAIN, OFF)


def decided_verdict(
    rules: Sequence[PercentileRule | ErrorRateRule],
    records: Sequence[RequestRecord],
    now: float,
    t: float,
    length: StageLength,
    confidence: float,
) -> Abort | None:
    """The `decided` rule at a look `t` seconds into the stage (see the module docstring)."""
    verdicts = []
    for rule in rules:
        count = OverCount.of(rule.outcomes(records, now))
        most = math.floor(count.known * length.scale(t))
        verdicts.append(counted_verdict(rule.slo, count, rule.limit, math.nan, confidence, length.looks, most))
    reason = stop_reason(verdicts, t, length)
    if reason is None or t >= length.cap_s - 1e-9:  # at the cap the schedule ends by itself
        return None
    if any(v.verdict == VIOLATED and v.basis == "interval" for v in verdicts):
        return Abort(reason)
    ran_on = f" (ran on past its {length.nominal_s:.0f} s while undecided)" if t > length.nominal_s + 1e-9 else ""
    decided = "; ".join(v.text() for v in verdicts) or "no SLO with a count"
    return Abort(f"decided after {t:.0f} s{ran_on}: {decided}", passed=stage_passed(verdicts), drain=True)


def abort_check(
    slos: Sequence[SLOSpec],
    rate: float,
    rule: str = CERTAIN,
    capacity_stage: bool = False,
    *,
    length: StageLength | None = None,
    first_offset: float = 0.0,
    confidence: float = DEFAULT_CONFIDENCE,
) -> AbortCheck:
    """One function for the load generator to call while a stage runs: the first reason to stop.

    `rule`: one of `STOP_RULES` (`off` is the caller's to honour by passing no check);
    `capacity_stage`: a likely pass may stop the stage too (with `likely`); under `decided`, a
    percentile that is certainly over its bound in the planned sample does not cut it, only its
    decided verdicts do. Its counts enter the capacity fit, and requests over a bound come in
    runs: a stage cut on the run that made its sample's percentile certain leaves the fit the
    share of a burst (docs/results.md, "Clustered exceedances"). A target stage keeps that cut:
    a miss there stops the screened trial, and the confirmation measures its candidates in full.
    `length` (`decided`): the stage's nominal length, cap and looks, `first_offset` its first
    request's due time from its start (s), `confidence` its verdicts'.
    It is handed every planned record (sent or not), so the plan's size per class, which the
    percentile rules count against, is read from the records on the first call."""
    if rule not in (DECIDED, LIKELY, CERTAIN):
        raise ValueError(f"rule must be {DECIDED!r}, {LIKELY!r} or {CERTAIN!r}, not {rule!r}")
    if rule == DECIDED and length is None:
        raise ValueError("the decided rule needs the stage's length")
    rules: list[AbortRule] | None = None
    looks = iter(length.checkpoints() if length is not None else ())
    look = next(looks, math.inf)

    def check(records: Sequence[RequestRecord], now: float, samples: Sequence[GaugeSample]) -> Abort | None:
        nonlocal rules, look
        if rules is None:
            rules = rules_for(slos, dict(Counter(r.class_name for r in records)))
        for r in rules:
            if capacity_stage and rule == DECIDED and isinstance(r, PercentileRule):
                continue
            verdict = r.lost(records, now)
            if verdict is not None:
                return verdict
        verdict = queue_runaway(samples, rate, now)
        if verdict is not None or rule == CERTAIN:
            return verdict
        if rule == DECIDED and length is not None:
            started = records[0].scheduled_time - first_offset if records else math.nan
            t = now - started
            if not t >= look:  # NaN (nothing sent yet) or before the next look
                return over_saturated(samples, records, now, rate)
            while look <= t:
                look = next(looks, math.inf)
            counted = [r for r in rules if isinstance(r, (PercentileRule, ErrorRateRule))]
            return over_saturated(samples, records, now, rate) or decided_verdict(
                counted, records, now, t, length, confidence
            )
        # a likely pass only where every SLO the stage is held to has a rule that can tell
        return over_saturated(samples, records, now, rate) or likely_verdict(
            rules, records, now, capacity_stage and len(rules) == len(slos)
        )

    return check
