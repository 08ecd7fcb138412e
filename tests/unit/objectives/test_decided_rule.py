"""objectives.early_abort's `decided` rule: a stage looked at in slices stops once its verdict is
decided (a violation at any look, met from its nominal length on, draining its requests in
flight), and runs on while undecided."""

from __future__ import annotations

import pytest

from objectives.early_abort import abort_check, replay
from objectives.scoring import SLOSpec
from objectives.slo_verdict import StageLength
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
