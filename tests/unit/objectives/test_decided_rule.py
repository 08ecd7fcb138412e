"""objectives.early_abort's `decided` rule: a stage looked at in slices stops once its verdict is
decided (a violation at any look, met from its nominal length on, draining its requests in
flight), and runs on while undecided."""

from __future__ import annotations

import pytest

from objectives.early_abort import abort_check
from objectives.scoring import SLOSpec
from objectives.slo_verdict import StageLength
from objectives.stage_replay import replay
from tests.support.simulated_stages import done

P95 = [SLOSpec(metric="ttft_p95_ms", max=500.0)]
LENGTH = StageLength(nominal_s=30.0, cap_s=90.0, slice_s=15.0)


def stage(rate: float, slow_every: int | None = None) -> list:
    """Requests at `rate`/s planned to the cap, 0.1 s to first token; every `slow_every`-th 0.8 s."""
    n = int(rate * LENGTH.cap_s)
    return [done(i, i / rate, 0.8 if slow_every and i % slow_every == slow_every - 1 else 0.1) for i in range(n)]


def stopped(records, rate):
    check = abort_check(P95, rate, "decided", length=LENGTH, first_offset=0.0)
    return replay(check, records, LENGTH.cap_s + 5)


def test_a_stage_met_by_its_nominal_length_stops_there_and_drains():
    when = stopped(stage(4.0), 4.0)  # 120 requests by 30 s, none slow: met
    assert when is not None
    t, abort = when
    assert 30.0 <= t < 31.0 and abort.drain and abort.passed
    assert "decided after 30 s" in abort.reason


def test_an_undecided_stage_runs_on_and_stops_once_decided():
    t, abort = stopped(stage(1.5), 1.5)  # 45 by 30 s cannot call a p95 met; 135 by the cap can
    assert 30.0 < t < 90.0 and abort.drain and abort.passed
    assert "ran on past its 30 s" in abort.reason


def test_a_decided_violation_stops_at_the_first_look_and_cuts():
    t, abort = stopped(stage(4.0, slow_every=4), 4.0)  # 25% over
    assert t < 16.0 and not abort.drain and not abort.passed


def test_a_stage_at_the_limit_runs_to_its_cap():
    assert stopped(stage(2.0, slow_every=20), 2.0) is None  # 5% over: never decided


def test_the_decided_rule_needs_the_stage_length():
    with pytest.raises(ValueError, match="length"):
        abort_check(P95, 1.0, "decided")


def test_a_burst_that_makes_the_planned_p95_certain_cuts_a_target_stage_but_not_a_capacity_stage():
    """20 slow requests in a row at the start of 360 planned: the planned sample's p95 is certain
    to be over the bound, and the certain rule cuts a target stage there. A capacity stage's counts
    enter the capacity fit, so only its decided verdicts stop it, and one run of 20 decides
    nothing (`objectives.design_effect`)."""
    records = [done(i, i / 4.0, 0.8 if i < 20 else 0.1) for i in range(int(4.0 * LENGTH.cap_s))]

    def stopped(capacity_stage):
        check = abort_check(P95, 4.0, "decided", capacity_stage, length=LENGTH, first_offset=0.0)
        return replay(check, records, LENGTH.cap_s + 5)

    t, cut = stopped(False)
    assert t < 10.0 and "is certain" in cut.reason and not cut.passed
    searched = stopped(True)
    assert searched is None or searched[1].passed
