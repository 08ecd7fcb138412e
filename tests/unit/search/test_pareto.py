"""Front, hypervolume and the rule that picks one config."""

import optuna
import pytest
from optuna.distributions import FloatDistribution

from search import pareto
from search.scenario import Selection


def make_study(points, feasible=None):
    study = optuna.create_study(directions=["maximize", "minimize"])
    for i, (a, b) in enumerate(points):
        ok = feasible is None or feasible[i]
        study.add_trial(
            optuna.trial.create_trial(
                params={"x": float(i)},
                distributions={"x": FloatDistribution(0, 100)},
                values=[a, b],
                constraints={"slo": -1.0 if ok else 1.0},
            )
        )
    return study


def test_front_holds_feasible_nondominated_trials_only():
    study = make_study([(10, 100), (12, 150), (8, 90), (11, 200), (20, 50)], feasible=[True, True, True, True, False])
    assert sorted(t.number for t in pareto.front(study)) == [0, 1, 2]


def test_hypervolume_two_objectives_against_a_fixed_reference():
    ref = pareto.reference_point([10.0, 100.0], ["maximize", "minimize"])
    assert ref == [0.0, 200.0]
    hv = pareto.hypervolume([[10, 100], [5, 50]], ["maximize", "minimize"], ref)
    # union of [0,10]x[100,200] and [0,5]x[50,200] = 1000 + 5*50
    assert hv == pytest.approx(1250.0)
    assert pareto.hypervolume([[1, 300]], ["maximize", "minimize"], ref) == 0.0  # outside the box


def test_selection_rules():
    study = make_study([(10, 100), (9.8, 60), (6, 20), (12, 300)])
    members = pareto.front(study)
    names, dirs = ["goodput", "ttft"], ["maximize", "minimize"]
    pick = pareto.select(members, dirs, names, Selection(rule="best_of", metric="goodput"))
    assert pick.number == 3
    pick = pareto.select(members, dirs, names, Selection(rule="best_of", metric="goodput", tolerance=0.2, then="ttft"))
    assert pick.number == 1  # within 20% of 12: 10, 9.8, 12 -> lowest ttft
    pick = pareto.select(members, dirs, names, Selection(rule="knee"))
    assert pick.number == 1
    assert pareto.select([], dirs, names, Selection()) is None


def test_selection_sentence_says_what_select_does():
    # goodput is maximized, ttft minimized. The tolerance widens the best *goodput* (12): trials
    # 0 (10) and 1 (9.8) are within 20% of it, trial 2 (6) is not although its ttft is the best.
    study = make_study([(10, 100), (9.8, 60), (6, 20), (12, 300)])
    members = pareto.front(study)
    names, dirs = ["goodput", "ttft"], ["maximize", "minimize"]

    rule = Selection(rule="best_of", metric="goodput", tolerance=0.2, then="ttft")
    assert rule.describe() == "the best ttft among the configurations within 20% of the best goodput"
    assert pareto.select(members, dirs, names, rule).number == 1

    rule = Selection(rule="best_of", metric="goodput", tolerance=0.2)  # no `then`: tolerance moot
    assert rule.describe() == "the best goodput"
    assert pareto.select(members, dirs, names, rule).number == 3

    rule = Selection(rule="best_of", metric="ttft", then="goodput")  # tolerance 0: a tie-break
    assert rule.describe() == "the best ttft, ties broken by the best goodput"
    assert pareto.select(members, dirs, names, rule).number == 2

    rule = Selection(rule="knee")
    assert rule.describe().startswith("the knee of the front: the configuration closest to the ideal point")
    assert pareto.select(members, dirs, names, rule).number == 1
