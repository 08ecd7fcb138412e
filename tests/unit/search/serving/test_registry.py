"""The parameter registry: support read from the installed vLLM, drops, substitutions, checks."""


import pytest

from search.serving import registry
from search.serving.registry import ConfigError, LaunchContext, check_combination, resolve
from search.serving.vllm_flags import load_installed
from tests.support.fakes import CPU, H100, MODEL, ctx

def test_delay_factor_is_dropped_when_the_installed_vllm_lacks_it_and_no_substitute_acts():
    c = ctx("0.32.0")
    args = resolve({"scheduler_delay_factor": 0.1, "max_num_seqs": 64}, c)
    assert "--scheduler-delay-factor" not in args.cli(c.installed)
    assert "--prefill-schedule-interval" not in args.cli(c.installed)
    [adj] = args.adjustments
    assert adj.param == "scheduler_delay_factor" and adj.action == "dropped"
    assert "removed in vLLM 0.11.0" in adj.detail and "not passed" in adj.detail
    assert args.values == {"max_num_seqs": 64}


def test_delay_factor_maps_to_prefill_interval_where_that_knob_acts():
    c = ctx("0.33.0")
    args = resolve({"scheduler_delay_factor": 0.5}, c)
    assert args.cli(c.installed) == ["--prefill-schedule-interval", "6"]
    [adj] = args.adjustments
    assert adj.action == "substituted" and adj.replacement == ("prefill_schedule_interval", 6)


def test_delay_factor_passes_through_on_an_old_vllm_that_accepts_it():
    c = ctx("0.10.1", extra=["--scheduler-delay-factor"])
    args = resolve({"scheduler_delay_factor": 0.15}, c)
    assert args.cli(c.installed) == ["--scheduler-delay-factor", "0.15"]
    assert args.adjustments == []


def test_swap_space_is_dropped_with_its_removal_version():
    c = ctx()
    args = resolve({"swap_space": 8}, c)
    assert args.cli(c.installed) == []
    assert "0.18.0" in args.adjustments[0].detail


def test_memory_utilization_maps_to_kv_bytes_on_cpu_and_gmu_on_gpu():
    cpu = ctx()
    assert resolve({"memory_utilization": 0.25}, cpu).flags == {"kv-cache-memory-bytes": 2**28}
    gpu = ctx(hw=H100)
    assert resolve({"memory_utilization": 0.9}, gpu).flags == {"gpu-memory-utilization": 0.9}


def test_booleans_render_both_ways_and_yaml_keys_are_flag_names():
    c = ctx()
    args = resolve({"enable_prefix_caching": False, "enable_chunked_prefill": True,
                    "enforce_eager": True, "dtype": "float32"}, c)
    assert args.cli(c.installed) == ["--no-enable-prefix-caching", "--enable-chunked-prefill",
                                     "--enforce-eager", "--dtype", "float32"]
    assert args.flags == {"enable-prefix-caching": False, "enable-chunked-prefill": True,
                          "enforce-eager": True, "dtype": "float32"}


def test_unknown_keys_and_bad_values_name_the_place_the_key_and_what_is_allowed():
    c = ctx()
    with pytest.raises(ConfigError, match=r"configs/x.yaml: 'max_seqs' is neither a tunable"):
        resolve({"max_seqs": 4}, c, where="configs/x.yaml")
    with pytest.raises(ConfigError, match=r"block_size=16 is not allowed; allowed: 32, 64, 128, 256"):
        resolve({"block_size": 16}, c)
    with pytest.raises(ConfigError, match=r"max_num_seqs=0 is not allowed; allowed: >= 1"):
        resolve({"max_num_seqs": 0}, c)
    with pytest.raises(ConfigError, match=r"enable_prefix_caching='yes'.*true or false"):
        resolve({"enable_prefix_caching": "yes"}, c)
    assert resolve({"block_size": 16}, ctx(hw=H100)).flags == {"block-size": 16}


@pytest.mark.parametrize("values, fragment", [
    ({"max_num_batched_tokens": 128, "max_num_seqs": 256}, "must be >= max_num_seqs"),
    ({"enable_chunked_prefill": False, "max_num_batched_tokens": 1024, "max_model_len": 2048},
     "chunked prefill off"),
    ({"max_num_seqs": 8, "max_num_active_seqs": 16}, "max_num_active_seqs (16)"),
    ({"max_num_active_seqs": 200}, "max_num_seqs (128)"),  # CPU default max_num_seqs
    ({"long_prefill_token_threshold": 4096, "max_model_len": 2048}, "long_prefill_token_threshold"),
    ({"max_model_len": 16384}, "max_position_embeddings (8192)"),
    ({"memory_utilization": 0.01, "max_model_len": 8192}, "less than one 8192-token request"),
])
def test_known_invalid_combinations_are_caught_before_start(values, fragment):
    problems = check_combination(values, ctx())
    assert len(problems) == 1 and fragment in problems[0]


def test_valid_combination_and_workload_fit():
    c = ctx()
    ok = {"max_num_batched_tokens": 2048, "max_num_seqs": 64, "max_model_len": 2048,
          "enable_chunked_prefill": False, "memory_utilization": 0.5}
    assert check_combination(ok, c, longest_request=2048) == []
    assert "does not fit max_model_len" in check_combination(ok, c, longest_request=3000)[0]


def test_every_registry_flag_is_spelled_as_vllm_spells_flags():
    for spec in registry.PARAMS:
        if spec.flag:
            assert spec.flag.startswith("--") and "_" not in spec.flag


def test_real_installed_vllm_parser_decides_support():
    """Reads the installed vLLM's own argument parser (cached after the first call)."""
    real = load_installed()
    assert real.accepts("--max-num-seqs") and real.accepts("--kv-cache-memory-bytes")
    if real.version_tuple >= (0, 11):
        assert not real.accepts("--scheduler-delay-factor")
    if real.version_tuple >= (0, 18):
        assert not real.accepts("--swap-space")
    c = LaunchContext(installed=real, hardware=CPU, model=MODEL, cpu_kv_budget_bytes=2**30)
    cli = resolve({"scheduler_delay_factor": 0.2, "swap_space": 4, "max_num_seqs": 8}, c).cli(real)
    assert "--scheduler-delay-factor" not in cli and "--swap-space" not in cli
    assert cli[:2] == ["--max-num-seqs", "8"]
