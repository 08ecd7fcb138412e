"""The check a load run calls while a stage runs, and the decided rule (see the package)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from loadgen import Abort, AbortCheck, GaugeSample, RequestRecord
from objectives.early_abort.abort_rules import AbortRule, ErrorRateRule, PercentileRule, rules_for
from objectives.early_abort.likely import likely_verdict
from objectives.early_abort.saturation import over_saturated, queue_runaway
from objectives.scoring import SLOSpec
from objectives.slo_verdict import (
    DEFAULT_CONFIDENCE,
    VIOLATED,
    StageLength,
    counted_verdict,
    stage_passed,
    stop_reason,
)

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
        over, known = rule.counts(records, now)
        most = math.floor(known * length.scale(t))
        verdicts.append(counted_verdict(rule.slo, over, known, rule.limit, math.nan, confidence, length.looks, most))
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
    may_pass: bool = False,
    *,
    length: StageLength | None = None,
    first_offset: float = 0.0,
    confidence: float = DEFAULT_CONFIDENCE,
) -> AbortCheck:
    """One function for the load generator to call while a stage runs: the first reason to stop.

    `rule`: one of `STOP_RULES` (`off` is the caller's to honour by passing no check);
    `may_pass`: a likely pass may stop the stage too (capacity stages, with `likely`).
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
            rules, records, now, may_pass and len(rules) == len(slos)
        )

    return check
