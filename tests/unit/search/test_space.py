"""The study's search space: unsupported parameters are not sampled; baselines sample only what they set."""

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from search import scenario, space
from search.scenario import Domain, RelativeToDefault
from search.space import SpaceError
from tests.support.fakes import CPU, H100, ctx

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


RELATIVE = {
    "max_num_seqs": Domain(low=RelativeToDefault(x_default=1 / 32), high=RelativeToDefault(x_default=1), log=True),
    "max_num_batched_tokens": Domain(
        low=RelativeToDefault(x_default=0.125), high=RelativeToDefault(x_default=2), log=True
    ),
}


def test_a_range_in_multiples_of_vllms_default_is_the_same_search_on_a_cpu_and_on_a_gpu():
    """vLLM runs 128 sequences and 2,048 batched tokens on its CPU build, 1,024 and 8,192 on an
    H100: the same multiples cover its defaults on both, and the start of the study says the range."""
    on_cpu, cpu_notes = space.active_space(RELATIVE, ctx(hw=CPU), "x")
    on_gpu, gpu_notes = space.active_space(RELATIVE, ctx(hw=H100), "x")
    assert on_cpu["max_num_seqs"] == IntDistribution(4, 128, log=True)
    assert on_cpu["max_num_batched_tokens"] == IntDistribution(256, 4096, log=True)
    assert on_gpu["max_num_seqs"] == IntDistribution(32, 1024, log=True)
    assert on_gpu["max_num_batched_tokens"] == IntDistribution(1024, 16384, log=True)
    assert cpu_notes[0] == "max_num_seqs: [4, 128] on this machine (0.03125x to 1x vLLM's default here, 128)"
    assert (
        gpu_notes[1] == "max_num_batched_tokens: [1024, 16384] on this machine (0.125x to 2x vLLM's default here, 8192)"
    )


def test_an_integer_range_in_multiples_rounds_inward_and_an_empty_one_is_an_error():
    inner = {"max_num_seqs": Domain(low=RelativeToDefault(x_default=0.11), high=RelativeToDefault(x_default=0.499))}
    assert space.active_space(inner, ctx(), "x")[0]["max_num_seqs"] == IntDistribution(15, 63)  # 14.08, 63.87
    mixed_kinds = {"max_num_seqs": Domain(low=200, high=RelativeToDefault(x_default=1))}
    with pytest.raises(SpaceError, match=r"x: search_space.max_num_seqs: 200 to 1x vLLM's default is \[200, 128\]"):
        space.active_space(mixed_kinds, ctx(), "x")
    assert space.active_space(mixed_kinds, ctx(hw=H100), "x")[0]["max_num_seqs"] == IntDistribution(200, 1024)


# The ranges each built-in scenario was fitted to on the 2-core CPU: (max_num_seqs, max_num_batched_tokens).
CPU_RANGES = {
    "mixed": ((4, 128), (256, 4096)),
    "online_chat": ((4, 128), (256, 4096)),
    "api_service": ((8, 256), (256, 8192)),
    "batch_processing": ((8, 256), (512, 8192)),
    "chat_sessions": ((4, 128), (512, 4096)),
}


def test_the_shipped_scenarios_search_the_cpu_ranges_on_the_cpu_and_vllms_defaults_on_a_gpu():
    """On the CPU build each built-in scenario searches what its ranges were fitted to; on an H100
    vLLM's own defaults are a point of the space, so that baseline is one the sampler can model."""
    for name, (seqs, tokens) in CPU_RANGES.items():
        sc, _, shown = scenario.load(name)
        on_cpu, _ = space.active_space(sc.search_space, ctx(hw=CPU), shown)
        assert (on_cpu["max_num_seqs"].low, on_cpu["max_num_seqs"].high) == seqs, name
        assert (on_cpu["max_num_batched_tokens"].low, on_cpu["max_num_batched_tokens"].high) == tokens, name
        on_gpu, _ = space.active_space(sc.search_space, ctx(hw=H100), shown)
        defaults = space.effective_params({}, on_gpu, ctx(hw=H100), shown)
        assert {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}.items() <= defaults.items(), name
