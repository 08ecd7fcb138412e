"""objectives.agreement: the screening's calls against the confirmation's."""

from __future__ import annotations

import math

import pytest

from objectives.agreement import (
    Agreement,
    Call,
    CandidateAgreement,
    agreement,
    confirmed_call,
    pooled,
    share,
    shortest_agreeing,
)


def row(name, screen, confirmed):
    return CandidateAgreement(name, screen, confirmed)


# The study in the issue: both baselines screened feasible, confirmed infeasible; the pick agreed.
DEFAULTS = row("vllm_defaults", Call(True, 1.56, 1.2, 1.9), Call(False, 0.66, 0.63, 0.69))
SEED = row("seed", Call(True, 1.53, 1.2, 1.9), Call(False, 0.65, 0.63, 0.69))
PICK = row("3", Call(True, 2.4, 2.0, 2.9), Call(True, 2.3, 2.2, 2.4))


def test_a_study_whose_baselines_flipped_agrees_on_one_of_three():
    a = agreement([DEFAULTS, SEED, PICK])
    assert (a.feasibility.agreed, a.feasibility.of) == (1, 3)
    assert (a.capacity.agreed, a.capacity.of) == (1, 3)
    assert not a.meets(0.9)
    assert a.median_ratio == pytest.approx(1.53 / 0.65)  # the middle of 2.36, 2.35, 1.04
    assert "1 of 3" in a.lines()[0]


def test_a_study_without_capacities_says_only_its_feasibility_share():
    """A scenario without a capacity search (a closed loop): feasibility alone, no capacity line."""
    a = agreement([row("0", Call(True), Call(True)), row("1", Call(True), Call(False))])
    assert a.lines() == ["feasibility at the target: screening agrees with the confirmation on " + a.feasibility.text()]
    assert len(agreement([DEFAULTS, PICK]).lines()) == 2


def test_the_share_carries_its_exact_interval():
    s = share([True] * 9 + [False])
    assert (s.agreed, s.of) == (9, 10) and s.low < 0.9 < s.high
    assert share([None, True]).of == 1


def test_an_unknown_side_is_left_out():
    unknown = row("9", Call(None), Call(True, 1.0, 0.9, 1.1))
    a = agreement([PICK, unknown])
    assert a.feasibility.of == 1 and a.capacity.of == 1
    assert unknown.capacity_ratio is None


def test_a_censored_screening_interval_contains_any_capacity_above_its_low_end():
    censored = row("4", Call(True, 3.0, 3.0, math.inf), Call(True, 5.0, 4.0, 6.0))
    assert censored.capacity_agrees


def test_studies_pool_their_candidates():
    a, b = agreement([DEFAULTS, SEED, PICK]), agreement([PICK, PICK, PICK])
    both = pooled([a, b])
    assert (both.feasibility.agreed, both.feasibility.of) == (4, 6)


def test_the_confirmation_call_from_runs_is_the_majority_and_the_median():
    c = confirmed_call([False, True, False], [0.7, 1.8, 0.6])
    assert c == Call(False, 0.7, 0.6, 1.8)
    assert confirmed_call([], []).feasible is None


def test_the_shortest_screening_that_agrees_and_keeps_agreeing():
    good = agreement([PICK] * 10)
    bad = agreement([PICK] * 8 + [DEFAULTS] * 2)
    by_length: dict[float, Agreement] = {15.0: bad, 30.0: good, 45.0: bad, 60.0: good, 90.0: good}
    assert shortest_agreeing(by_length) == 60.0
    assert shortest_agreeing({15.0: bad}) is None


def test_a_length_without_calls_does_not_hide_a_shorter_one_that_agrees():
    good = agreement([PICK] * 10)
    assert shortest_agreeing({20.0: good, 30.0: agreement([]), 45.0: agreement([])}) == 20.0
