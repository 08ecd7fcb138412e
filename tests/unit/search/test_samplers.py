"""Baselines as points of the search space, and the joint samplers (GP, NSGA-II) on the whole
space: a study with a `vllm_defaults: {}` baseline makes model-guided proposals on every knob."""

import pytest
from optuna.trial import TrialState

from search.proposals import SpaceFillingStart
from search.samplers import DEFAULT_SAMPLER, _TrialsWithEveryParameter
from search.scenario import Domain, ScenarioError
from search.space import distribution, effective_params
from tests.support.fakes import CPU, H100, ctx
from tests.support.paths import FIXTURES
from tests.support.scripted_executor import ScriptedExecutor
from tests.support.study_loop import optuna_trials, rows, runner


def _scenario_holding_the_defaults(tmp_path):
    """loop.yaml with max_num_seqs up to 256: vLLM's CPU defaults (128, 2048) lie in the space."""
    text = (FIXTURES / "scenarios" / "loop.yaml").read_text()
    path = tmp_path / "loop.yaml"
    path.write_text(
        text.replace("max_num_seqs: {low: 2, high: 64, log: true}", "max_num_seqs: {low: 2, high: 256, log: true}")
    )
    return path


def _baseline(trials):
    return next(t for t in trials if t.user_attrs.get("baseline") == "vllm_defaults")


def test_a_baseline_that_sets_nothing_is_told_to_optuna_at_vllms_defaults_and_stored_as_written(tmp_path):
    r = runner(tmp_path, ScriptedExecutor(), scenario=_scenario_holding_the_defaults(tmp_path), trials=6, sampler="gp")
    r.run()
    told = _baseline(optuna_trials(r))
    assert told.params == {"max_num_seqs": 128, "max_num_batched_tokens": 2048}
    row = next(row for row in rows(r) if row.baseline == "vllm_defaults")
    assert row.params == {} and "max_num_seqs" not in row.config  # the row: the config as applied
    fitted = _TrialsWithEveryParameter(r.study, r.prep.dists)._get_trials(states=(TrialState.COMPLETE,))
    assert told.number in {t.number for t in fitted}  # the GP fits on it


@pytest.mark.parametrize("name", ["gp", "nsga2"])
def test_a_joint_sampler_proposes_on_the_whole_space_when_a_baseline_lies_outside_it(tmp_path, name):
    """loop.yaml searches max_num_seqs in [2, 64]; vLLM's CPU default is 128, so the baseline has
    no value there. Optuna's intersection space would be max_num_batched_tokens alone."""
    r = runner(tmp_path, ScriptedExecutor(), trials=9, sampler=name)
    r.run()
    assert "max_num_seqs" not in _baseline(optuna_trials(r)).params
    trial = r.study.ask()
    frozen = r.study._storage.get_trial(trial._trial_id)
    space = r.study.sampler.infer_relative_search_space(r.study, frozen)
    assert set(space) == set(r.prep.dists)
    proposed = r.study.sampler.sample_relative(r.study, frozen, space)
    assert set(proposed) == set(r.prep.dists)  # model-guided on every knob, not at random


def test_gp_proposals_after_its_startup_are_model_guided_on_every_knob(tmp_path):
    r = runner(tmp_path, ScriptedExecutor(), trials=9, sampler="gp")
    r.run()
    sampled = [t for t in optuna_trials(r) if "baseline" not in t.user_attrs]
    guided = [t for t in sampled if "gp:relative_params:0" in t.system_attrs]
    assert len(guided) >= 4
    assert all(set(t.params) == set(r.prep.dists) for t in guided)
    assert all(f'"{k}"' in t.system_attrs["gp:relative_params:0"] for t in guided for k in r.prep.dists)


def test_effective_params_take_the_configs_own_values_then_vllms_defaults_and_leave_out_what_the_space_cannot_hold():
    dists = {
        "max_num_seqs": distribution("max_num_seqs", Domain(low=4, high=128, log=True), "t", CPU),
        "max_num_batched_tokens": distribution("max_num_batched_tokens", Domain(low=256, high=4096), "t", CPU),
        "memory_utilization": distribution("memory_utilization", Domain(low=0.05, high=0.95), "t", CPU),
        "enable_prefix_caching": distribution("enable_prefix_caching", Domain(choices=[True, False]), "t", CPU),
    }
    assert effective_params({}, dists, ctx(), "t") == {
        "max_num_seqs": 128,
        "max_num_batched_tokens": 2048,
        "memory_utilization": 0.92,
        "enable_prefix_caching": True,
    }
    assert (
        effective_params({"max_num_seqs": 64, "enable_prefix_caching": False}, dists, ctx(), "t")["max_num_seqs"] == 64
    )
    on_h100 = effective_params({}, dists, ctx(hw=H100), "t")  # 8192 tokens, 1024 sequences: outside the ranges
    assert "max_num_seqs" not in on_h100 and "max_num_batched_tokens" not in on_h100


def test_sobol_tpe_runs_its_first_sampled_trials_on_the_sobol_design_and_baselines_do_not_use_it_up(tmp_path):
    r = runner(tmp_path, ScriptedExecutor(), trials=8, sampler="sobol-tpe")
    r.run()
    design = r.study.sampler.points
    assert len(design) == 3  # max(3, 8 // 3)
    sampled = [t.params for t in optuna_trials(r) if "baseline" not in t.user_attrs]
    assert sampled[:3] == design  # in order, after the baselines
    assert sampled[3] not in design  # then TPE


def test_the_sobol_design_covers_each_knob_evenly():
    """4 scrambled Sobol points: two in each half of every dimension (i.i.d. draws often put 3 or 4 in one)."""
    from search.proposals import sobol_points

    dists = {
        "max_num_seqs": distribution("max_num_seqs", Domain(low=4, high=256, log=True), "t", CPU),
        "memory_utilization": distribution("memory_utilization", Domain(low=0.1, high=0.9), "t", CPU),
    }
    for seed in range(5):
        points = sobol_points(dists, 4, seed)
        assert sum(p["max_num_seqs"] < 32 for p in points) == 2  # 32: the geometric middle of [4, 256]
        assert sum(p["memory_utilization"] < 0.5 for p in points) == 2


def test_a_study_samples_with_its_scenarios_default_sampler_unless_told_otherwise(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text((FIXTURES / "scenarios" / "loop.yaml").read_text() + "default_sampler: sobol-tpe\n")
    assert runner(tmp_path, ScriptedExecutor(), scenario=path).prep.sampler == "sobol-tpe"
    assert isinstance(runner(tmp_path, ScriptedExecutor(), scenario=path).study.sampler, SpaceFillingStart)
    assert runner(tmp_path, ScriptedExecutor(), scenario=path, sampler="random").prep.sampler == "random"
    assert runner(tmp_path, ScriptedExecutor()).prep.sampler == DEFAULT_SAMPLER  # loop.yaml names none


def test_a_scenario_naming_an_unknown_sampler_is_refused_naming_the_file_field_and_choices(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text((FIXTURES / "scenarios" / "loop.yaml").read_text() + "default_sampler: smac\n")
    with pytest.raises(
        ScenarioError, match=r"loop.yaml: default_sampler: 'smac' is not a sampler; choose one of tpe, .*random"
    ):
        runner(tmp_path, ScriptedExecutor(), scenario=path)


def test_every_design_point_runs_when_other_proposals_come_between_them():
    """A trial the design did not fill (the diagnosis proposer's move) does not use up a point."""
    import optuna
    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial

    dists = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
    sampler = SpaceFillingStart(optuna.samplers.RandomSampler(seed=0), dists, 2, seed=0)
    study = optuna.create_study(sampler=sampler)
    first = study.ask(dists)
    assert first.params == sampler.points[0]
    study.tell(first, 0.0)
    study.add_trial(create_trial(params={"x": 0.5, "y": 0.5}, distributions=dists, value=0.0))  # a move
    second = study.ask(dists)
    assert second.params == sampler.points[1]
    study.tell(second, 0.0)
    assert study.ask(dists).params not in sampler.points  # the design is done: the base sampler


@pytest.mark.parametrize("name", ["sobol-tpe", "diagnosis-sobol-tpe"])
def test_a_warm_start_prior_reaches_the_tpe_inside_a_sobol_start(name):
    """The prior already says where to look: the design gives way to TPE fitted on it."""
    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial

    from search.proposals import DiagnosisProposer, PriorSampler, takes_prior, with_prior
    from search.samplers import make_sampler

    dists = {"x": FloatDistribution(0.0, 1.0)}
    sampler = make_sampler(name, 0, dists, 9)
    assert takes_prior(sampler)
    warm = with_prior(sampler, [create_trial(params={"x": 0.3}, distributions=dists, value=1.0)], ["minimize"])
    inner = warm.base if isinstance(warm, DiagnosisProposer) else warm
    assert isinstance(inner, PriorSampler) and inner.prior == 1
