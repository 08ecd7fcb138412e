"""objectives.design_effect and the verdicts that use it: requests over a bound that come in runs
(a burst delays several together) count as fewer independent ones, so one burst decides nothing
that the same count spread out would."""

from __future__ import annotations

import math

import numpy as np
import pytest

from objectives.design_effect import OverCount, design_effect
from objectives.early_abort import abort_check
from objectives.scoring import SLOSpec
from objectives.slo_verdict import UNDECIDED, VIOLATED, SLOVerdict, StageLength, counted_verdict, slo_verdicts
from objectives.stage_replay import replay
from tests.support.simulated_stages import done

P95 = 0.05


def runs_of(size: int, count: int, known: int) -> list[bool]:
    """`count` runs of `size` requests over the bound, spread evenly among `known`."""
    out = [False] * known
    gap = known // count
    for r in range(count):
        out[r * gap : r * gap + size] = [True] * size
    return out


@pytest.mark.parametrize("share", [0.05, 0.15, 0.33])
def test_independent_requests_have_a_design_effect_near_one(share):
    rng = np.random.default_rng(0)
    effects = [design_effect(list(rng.random(147) < share)) for _ in range(300)]
    assert 1.0 <= np.mean(effects) < 1.15


def test_runs_give_about_their_length_against_what_chance_gives():
    outcomes = runs_of(5, 4, 60)  # 20 of 60 over, in 4 runs of 5
    share = 20 / 60
    assert design_effect(outcomes) == pytest.approx(5 * (1 - share) / (1 + share))
    assert design_effect(runs_of(1, 4, 60)) == 1.0  # spread out: never below 1
    assert design_effect([True] + [False] * 59) == 1.0  # one request over: nothing to read
    assert design_effect([]) == 1.0


def test_a_count_in_runs_is_not_decided_where_the_same_count_spread_out_is():
    spread = counted_verdict("p95", OverCount(12, 60), P95, math.nan)
    burst = counted_verdict("p95", OverCount.of(runs_of(12, 1, 60)), P95, math.nan)
    assert spread.verdict == VIOLATED
    assert burst.verdict == UNDECIDED and burst.high > spread.high and burst.low < spread.low
    assert f"in runs, as {60 / burst.deff:.0f} independent" in burst.text()
    assert SLOVerdict.from_dict(burst.as_dict()) == burst
    assert "in runs" not in spread.text() and "deff" not in spread.as_dict()


def test_a_finished_stage_reads_its_runs_in_send_order():
    slo = SLOSpec(metric="ttft_p95_ms", max=500.0)

    def samples(slow):
        rows = [("a", i / 4, 0.8 if s else 0.1, 1.0, 8, True, False) for i, s in enumerate(slow)]
        keys = ("class", "sent_s", "ttft_s", "e2e_s", "output_tokens", "ok", "aborted")
        return {k: [r[i] for r in rows] for i, k in enumerate(keys)}

    [burst] = slo_verdicts([slo], samples(runs_of(12, 1, 60)), {})
    [spread] = slo_verdicts([slo], samples(runs_of(1, 12, 60)), {})
    assert (burst.over, burst.known, spread.over, spread.known) == (12, 60, 12, 60)
    assert burst.verdict == UNDECIDED and burst.deff is not None and burst.deff > 5
    assert spread.verdict == VIOLATED and spread.deff is None


def test_the_decided_rule_does_not_stop_a_stage_on_one_burst():
    """A stage whose first 10 requests are slow (a burst), the rest fast, is not cut as a
    violation at its first look; the same 10 spread over its first 60 requests is."""
    length = StageLength(nominal_s=30.0, cap_s=90.0, slice_s=15.0)
    p95 = [SLOSpec(metric="ttft_p95_ms", max=500.0)]

    def stage(slow):
        return [done(i, i / 4.0, 0.8 if slow(i) else 0.1) for i in range(360)]

    def stopped(records):
        return replay(abort_check(p95, 4.0, "decided", length=length, first_offset=0.0), records, 95.0)

    spread = stopped(stage(lambda i: i < 60 and i % 6 == 0))
    assert spread is not None and spread[0] < 16.0 and not spread[1].passed
    burst = stopped(stage(lambda i: i < 10))
    assert burst is None or burst[1].passed


def test_the_capacity_fit_counts_runs_as_fewer_requests():
    from objectives.stages.search_steps import fit_stages

    def stage(rate, over, known, deff=1.0):
        return rate, [counted_verdict("p95", OverCount(over, known, deff), P95, math.nan)], False

    rows = [(1.0, 0, 140), (2.0, 6, 140), (2.8, 30, 140)]
    plain = fit_stages([stage(*row) for row in rows])
    clustered = fit_stages([stage(*row, deff=4.0) for row in rows])
    assert clustered.high - clustered.low > plain.high - plain.low
