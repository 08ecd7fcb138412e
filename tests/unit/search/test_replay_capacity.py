"""A landscape's capacity: the fit's estimate and interval where recorded, the bracket before."""

from __future__ import annotations

import math

import pytest

from objectives.capacity import SLO_CAPACITY_RPS
from search.replay import Landscape
from search.replay.landscape import Config, ScreenedRun
from search.replay.surrogate import _bracket_ratio


def run(**kw) -> ScreenedRun:
    return ScreenedRun(1, True, **kw)


def test_the_capacity_is_the_fit_where_recorded_and_the_bracket_middle_before():
    fitted = run(capacity_low=1.0, capacity_high=4.0, capacity=3.2, capacity_fit_low=2.9, capacity_fit_high=3.5)
    assert fitted.capacity_point() == 3.2
    assert math.isclose(fitted.capacity_ratio(), 3.5 / 2.9)
    before = run(capacity_low=1.0, capacity_high=4.0)
    assert before.capacity_point() == 2.0 and before.capacity_ratio() == 4.0


def test_a_censored_fit_leaves_its_width_open():
    censored = run(capacity_low=3.0, capacity=3.0, capacity_fit_low=2.8, capacity_fit_high=None)
    assert censored.capacity_point() == 3.0 and censored.capacity_ratio() is None


def test_a_landscape_file_from_before_the_fit_still_reads():
    d = {
        "scenario": "mixed",
        "objectives": [{"metric": SLO_CAPACITY_RPS, "direction": "maximize"}],
        "slos": [],
        "space": {},
        "defaults": {},
        "calibration": {},
        "configs": [{"params": {}, "config": {}, "measurements": [{"run": 1, "served": True, "capacity_low": 1.0}]}],
        "schema": 1,
    }
    landscape = Landscape.from_dict(d)
    assert landscape.configs[0].measurements[0].capacity is None


def test_the_typical_width_is_read_from_the_fits():
    configs = [
        Config(
            {},
            {},
            None,
            [run(capacity_low=1.0, capacity_high=2.0, capacity=1.5, capacity_fit_low=1.4, capacity_fit_high=1.6)],
        )
        for _ in range(3)
    ]
    landscape = Landscape("mixed", [], [], {}, {}, {}, configs)
    assert math.isclose(_bracket_ratio(landscape), 1.6 / 1.4)


def test_repeats_prefer_what_an_earlier_landscape_repeated():
    from search.replay import repeat_rounds

    rounds = repeat_rounds(24, 12, 3, 0, prefer=[2, 13, 16, 19, 22, 40])
    assert len(rounds) == 2 and all(len(r) == 12 for r in rounds)
    assert {2, 13, 16, 19, 22} <= set(rounds[0]) and set(rounds[0]) == set(rounds[1])
    assert repeat_rounds(24, 12, 3, 0) == repeat_rounds(24, 12, 3, 0, prefer=[])


def test_the_earlier_landscapes_repeated_points_are_found_in_the_design():
    from benchmarks.bench_landscape import repeated_in

    design = [{"x": 1}, {"x": 2}, {"x": 3}]
    earlier = Landscape(
        "mixed",
        [],
        [],
        {},
        {},
        {},
        [Config({"x": 3}, {}, None, [run(), run()]), Config({"x": 1}, {}, None, [run()])],
    )
    assert repeated_in(earlier, design) == [2]


def test_a_replay_of_a_fitted_landscape_reports_the_fits_interval():
    from search.replay.executor import ReplayExecutor
    from search.replay.surrogate import Surrogate

    def measured(x: float) -> Config:
        fit = run(
            capacity_low=x, capacity_high=2 * x, capacity=1.5 * x, capacity_fit_low=1.4 * x, capacity_fit_high=1.6 * x
        )
        return Config({"x": x}, {"x": x}, None, [fit])

    landscape = Landscape(
        "mixed",
        [{"metric": "slo_capacity_rps", "direction": "maximize"}],
        [],
        {"x": {"low": 1.0, "high": 8.0}},
        {},
        {},
        [measured(x) for x in (1.0, 2.0, 4.0, 8.0)],
    )
    surrogate = Surrogate.fit(landscape)
    assert surrogate.fitted and math.isclose(surrogate.bracket_ratio, 1.6 / 1.4)
    est = ReplayExecutor(surrogate, None, 0)._capacity(3.0)
    assert est.fit_low is not None and math.isclose(est.fit_high / est.fit_low, 1.6 / 1.4)


def test_the_repeat_table_counts_flips_and_the_capacity_spread():
    steady = Config({}, {}, None, [run(feasible=True, capacity_low=2.0, capacity_high=4.0, trial_s=60.0)] * 3)
    flips = Config(
        {},
        {},
        None,
        [
            run(feasible=True, capacity_low=1.0, capacity_high=2.0, trial_s=60.0),
            run(feasible=False, capacity_low=None, capacity_high=1.0, trial_s=60.0),
        ],
    )
    spread = Config(
        {},
        {},
        None,
        [
            run(feasible=True, capacity_low=1.0, capacity_high=2.0, trial_s=60.0),
            run(feasible=True, capacity_low=2.0, capacity_high=4.0, trial_s=60.0),
        ],
    )
    never = Config({}, {}, None, [run(feasible=False, capacity_low=None, capacity_high=1.0, trial_s=60.0)] * 2)
    once = Config({}, {}, None, [run(feasible=True, capacity_low=1.0, capacity_high=2.0, trial_s=60.0)])
    table = Landscape("mixed", [], [], {}, {}, {}, [steady, flips, spread, never, once]).repeats()
    assert (table.configs, table.feasibility_agree) == (4, 3)
    # The CV over feasible runs only: steady 0; spread: sqrt(1 x 2) and sqrt(2 x 4), CV 0.4714; the
    # flip (one feasible run) and the never-feasible config (censored values) do not dilute it.
    assert table.capacity_cv == pytest.approx(math.sqrt(0.4714**2 / 2), rel=1e-3) and table.trial_s == 60.0
    assert "3 of 4 configs (75%)" in table.line("x")
