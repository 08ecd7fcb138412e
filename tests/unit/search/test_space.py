"""The study's search space: unsupported parameters are not sampled; baselines sample only what they set."""

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from search import space
from search.scenario import Domain
from search.space import SpaceError
from tests.support.fakes import ctx

SPACE = {
    "max_num_seqs": Domain(low=4, high=128, log=True),
    "memory_utilization": Domain(low=0.1, high=0.9),
    "scheduler_delay_factor": Domain(low=0.0, high=0.5),
    "enable_prefix_caching": Domain(choices=[True, False]),
}


def test_delay_factor_is_not_sampled_on_032_and_the_note_says_why():
    dists, notes = space.active_space(SPACE, ctx("0.32.0"), "configs/x.yaml")
    assert set(dists) == {"max_num_seqs", "memory_utilization", "enable_prefix_caching"}
    assert isinstance(dists["max_num_seqs"], IntDistribution) and dists["max_num_seqs"].log
    [note] = notes
    assert note.startswith("scheduler_delay_factor: --scheduler-delay-factor is removed in vLLM 0.11.0")
    assert "not searched" in note


def test_delay_factor_range_is_searched_through_its_substitute_where_it_acts():
    dists, notes = space.active_space(SPACE, ctx("0.33.0"), "x")
    assert dists["prefill_schedule_interval"] == IntDistribution(1, 6)
    assert "searching --prefill-schedule-interval in [1, 6] instead" in notes[0]


def test_choices_for_a_parameter_a_substitute_stands_in_for_are_an_error_that_says_so():
    """The substitute's range is mapped from the parameter's low and high: a list of choices has none."""
    with pytest.raises(SpaceError, match="--prefill-schedule-interval stands in for it here: give low/high"):
        space.active_space({"scheduler_delay_factor": Domain(choices=[0.0, 0.5])}, ctx("0.33.0"), "x")


def test_a_range_vllm_would_reject_is_an_error_before_anything_runs():
    with pytest.raises(Exception, match=r"x: search_space: block_size=16 is not allowed; allowed: 32, 64, 128, 256"):
        space.active_space({"block_size": Domain(choices=[16, 32])}, ctx(), "x")
    with pytest.raises(SpaceError, match="low/high must be integers"):
        space.active_space({"max_num_seqs": Domain(low=1.5, high=8)}, ctx(), "x")
    with pytest.raises(SpaceError, match="no parameter of search_space is supported"):
        space.active_space({"swap_space": Domain(low=1, high=8)}, ctx(), "x")


def test_representable():
    assert space.representable(64, IntDistribution(4, 128, log=True))
    assert not space.representable(256, IntDistribution(4, 128))
    assert not space.representable(0.5, IntDistribution(0, 4))
    assert space.representable(True, CategoricalDistribution([True, False]))
    assert space.representable(0.25, FloatDistribution(0.0, 1.0, step=0.05))
    assert not space.representable(0.27, FloatDistribution(0.0, 1.0, step=0.05))


def test_baseline_suggests_only_what_it_sets_and_search_trials_everything():
    dists, _ = space.active_space(SPACE, ctx(), "x")
    study = optuna.create_study(directions=["minimize"])
    baseline = {"max_num_seqs": 64, "memory_utilization": 0.92, "swap_space": 8}  # 0.92 is outside
    study.enqueue_trial({"max_num_seqs": 64}, user_attrs={"baseline": "b"})
    t = study.ask()
    assert space.suggest(t, dists, only=baseline) == {"max_num_seqs": 64}
    t2 = study.ask()
    assert set(space.suggest(t2, dists)) == set(dists)
