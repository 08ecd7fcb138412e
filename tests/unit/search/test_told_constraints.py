"""A told trial's constraints: each once for Optuna's samplers, in optuna-dashboard's list in the
order of their names, and by name for the selection rule and the confirmation's near misses.

The real study loop on the scripted executor (tests/fixtures/scenarios/loop.yaml: a 2000 ms TTFT
p95 SLO; the scripted server's TTFT p95 in ms is its max_num_batched_tokens)."""

import math

import optuna
import pytest
from optuna.samplers._gp import sampler as gp_sampler
from optuna_dashboard._serializer import serialize_frozen_trial

from search import pareto
from search.proposals import prior_trials
from tests.support.scripted_executor import ScriptedExecutor, failed_at, measured
from tests.support.study_loop import optuna_trials, rows, runner

MISSED = {"max_num_seqs": 8, "max_num_batched_tokens": 3000}  # TTFT p95 3000 ms: the SLO missed by half
MET = {"max_num_seqs": 8, "max_num_batched_tokens": 500}  # 500 ms: met, a quarter of the bound
FAILED = {"max_num_seqs": 9, "max_num_batched_tokens": 500}  # never served
SLO = "ttft_p95_ms<=2000"


def script(plan):
    return failed_at("startup")(plan) if plan.params == FAILED else measured(plan)


def told(tmp_path):
    """The study's told trials, each with its stored row."""
    r = runner(tmp_path, ScriptedExecutor(script), trials=3)
    for params in (MISSED, MET, FAILED):
        r.study.enqueue_trial(params)
    r.run()
    stored = {row.trial_number: row for row in rows(r)}
    return [(t, stored[t.number]) for t in optuna_trials(r) if t.state == optuna.trial.TrialState.COMPLETE]


def by_params(trials, params):
    [(t, row)] = [(t, row) for t, row in trials if t.params == params]
    return t, row


def test_optuna_holds_each_constraint_of_a_told_trial_once(tmp_path):
    trials = told(tmp_path)
    assert len(trials) == 3  # the three enqueued
    for t, row in trials:
        assert len(row.constraints) >= 2 and SLO in row.constraints
        assert len(t.constraints) == len(row.constraints)
        assert sorted(t.constraints.values()) == sorted(row.constraints.values())


def test_the_dashboards_list_holds_the_constraints_in_the_order_of_their_names(tmp_path):
    for t, row in told(tmp_path):
        listed = serialize_frozen_trial(0, t, {})["constraints"]  # what optuna-dashboard 0.21 colours from
        named = pareto.named_constraints(t)
        assert named == row.constraints
        assert listed == list(named.values())


def test_the_selection_rule_reads_the_constraints_by_name(tmp_path):
    trials = told(tmp_path)
    missed, _ = by_params(trials, MISSED)
    met, _ = by_params(trials, MET)
    failed, _ = by_params(trials, FAILED)
    assert pareto.named_constraints(missed)[SLO] == pytest.approx(0.5)
    assert pareto.slo_miss(missed) == pytest.approx(0.5) and not pareto.feasible(missed)
    assert pareto.slo_miss(met) == pytest.approx(-0.75) and pareto.feasible(met)
    assert pareto.slo_miss(failed) == math.inf and not pareto.feasible(failed)  # by its server_ok constraint


def test_the_gp_sampler_models_each_constraint_once(tmp_path, monkeypatch):
    widths = []
    fit = gp_sampler._get_constraint_vals_and_feasibility

    def counted(study, trials):
        vals, feasible = fit(study, trials)
        widths.append(vals.shape[1])
        return vals, feasible

    monkeypatch.setattr(gp_sampler, "_get_constraint_vals_and_feasibility", counted)
    r = runner(tmp_path, ScriptedExecutor(), trials=6, sampler="gp")
    r.run()
    n = {len(row.constraints) for row in rows(r)}
    assert len(n) == 1 and widths and set(widths) == n


def test_a_tell_a_kill_cut_short_is_told_again_whole(tmp_path, monkeypatch):
    """Killed after the constraints are written and before Optuna's tell: the next run tells the
    trial from its stored row, each constraint still once."""
    tell = optuna.Study.tell
    calls = []

    def killed_once(self, *a, **kw):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return tell(self, *a, **kw)

    monkeypatch.setattr(optuna.Study, "tell", killed_once)
    with pytest.raises(KeyboardInterrupt):
        runner(tmp_path, ScriptedExecutor(), trials=1).run()
    [half] = optuna_trials(runner(tmp_path, ScriptedExecutor()))
    assert half.state == optuna.trial.TrialState.RUNNING and pareto.CONSTRAINT_NAMES_ATTR in half.user_attrs

    r = runner(tmp_path, ScriptedExecutor(), trials=1)
    r.run()
    [t] = optuna_trials(r)
    [row] = rows(r)
    assert t.state == optuna.trial.TrialState.COMPLETE
    assert len(t.constraints) == len(row.constraints) and pareto.named_constraints(t) == row.constraints


def test_a_warm_starts_prior_trials_keep_the_constraints_by_name_each_once(tmp_path):
    trials = told(tmp_path)
    prior = prior_trials([t for t, _ in trials], trials[0][0].distributions)
    assert [p.constraints for p in prior] == [row.constraints for _, row in trials]
