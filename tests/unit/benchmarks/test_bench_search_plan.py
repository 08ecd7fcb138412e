"""make bench-search: a costly sampler's rows run at their own budget and seeds, and say so."""

from benchmarks.bench_search import OWN_PLANS, markdown, plan

TABLE = (5, 10, 20, 40)


def test_gp_runs_at_its_own_budget_and_seeds_and_every_other_row_at_the_tables():
    assert OWN_PLANS["gp"] == ((20,), 8)
    assert plan("gp", TABLE, 20) == ((20,), 8)
    assert plan("gp+warm", TABLE, 20) == ((20,), 8)
    assert plan("gp", TABLE, 3) == ((20,), 3)  # never more seeds than asked
    assert plan("tpe", TABLE, 20) == (TABLE, 20)
    assert plan("gp", TABLE, 20, all_budgets=True) == (TABLE, 20)


def test_a_narrowed_table_runs_gp_at_the_budgets_asked_when_its_own_is_not_among_them():
    assert plan("gp", (5, 10), 20) == ((5, 10), 8)
    assert plan("gp", (10, 20), 20) == ((20,), 8)


def _entry(seeds: int) -> dict:
    q = {"median": 0.5, "q1": 0.4, "q3": 0.6}
    return {
        "seeds": seeds,
        "hv": q,
        "deployed_capacity": q,
        "regret": q,
        "within_10pct": 0.5,
        "deployed_infeasible": 0.0,
        "baseline_kept_when_better": 0.0,
        "search_wall_min": 10.0,
    }


def test_the_table_names_a_row_run_on_fewer_seeds_or_budgets_than_the_others():
    summary = {
        "default": "tpe",
        "largest_budget": 40,
        "seeds": 20,
        "samplers": {
            "tpe": {"largest_budget": 40, "trials_to_90": 41.0, "trials_to_95": 41.0, "budgets": {"40": _entry(20)}},
            "gp": {"largest_budget": 20, "trials_to_90": 21.0, "trials_to_95": 21.0, "budgets": {"20": _entry(8)}},
        },
    }
    lines = markdown(summary).splitlines()
    assert lines[2].startswith("| tpe (default) | 40 |")
    assert lines[3].startswith("| gp (8 seeds) | 20 |") and "| >20 (run to 20) |" in lines[3]
