"""`benchmarks.plan_check`: this build's plan of a stored study, priced for what the study ran,
beside what it took; the case the baselines' screens picked."""

from __future__ import annotations

import pytest

from benchmarks.plan_check import plan_check
from search.executor import Measurement
from search.scenario import load
from search.study.baseline_stop import run_shares
from search.study.cost import study_cost
from tests.support.paths import FIXTURES
from tests.support.scripted_executor import ScriptedCalibration, ScriptedExecutor, staged
from tests.support.study_loop import runner

SCENARIO = FIXTURES / "scenarios" / "loop_calibrated_capacity.yaml"


def test_a_stored_study_is_planned_for_the_trials_and_runs_it_ran(tmp_path):
    """Three trials, the confirmation skipped (no sampled trial met the SLOs): the plan of three
    trials and no run, from the stored calibration; the baseline met the target in its screen."""
    executor = ScriptedExecutor()
    executor.script = staged(executor)
    calibrate = ScriptedCalibration(capacity_rps=8.0)
    runner(tmp_path, executor, scenario=SCENARIO, trials=3, calibrate=calibrate, confirm_runs=1).run()
    check = plan_check(f"sqlite:///{tmp_path / 'loop.db'}", "loop")
    assert check is not None and (check.trials, check.runs) == (3, 0)
    sc = load(SCENARIO)[0]
    cal = calibrate(sc, None, None, None, lambda _: None)
    full = Measurement.of(sc, cal)
    cost = study_cost(full.screened(sc.screening), full, cal, trials=3, confirmation_runs=0, shares=run_shares(sc, 1))
    assert check.plan_min == pytest.approx(cost.total_s / 60) == pytest.approx(3 * cost.trial_s / 60)
    assert (check.picked, check.case_min) == ("", None)  # no confirmation run: the cases do not differ
    assert check.replan_min is None and 0 <= check.took_min < 1  # scripted trials take no time
    assert check.confirmation_said_min is None and check.confirmation_took_min is None  # it ran no run
