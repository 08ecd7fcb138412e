"""The parameter registry: support read from the installed vLLM, drops, substitutions, checks."""

import pytest
from optuna.distributions import IntDistribution

from serving import parameters, server_flags
from serving.checks import check_combination
from serving.server_flags import ConfigError, resolve
from tests.support.fakes import H100, ctx


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


def test_performance_mode_is_dropped_with_the_release_that_added_it_on_an_older_vllm():
    c = ctx("0.16.0")  # its parser has no --performance-mode
    args = resolve({"performance_mode": "throughput", "max_num_seqs": 64}, c)
    assert args.cli(c.installed) == ["--max-num-seqs", "64"]
    [adj] = args.adjustments
    assert adj.param == "performance_mode" and adj.action == "dropped"
    assert adj.detail == (
        "--performance-mode was added in vLLM 0.17.0; the installed vllm 0.16.0 does not accept it; not passed"
    )


def test_performance_mode_is_kept_where_the_installed_parser_has_it():
    c = ctx("0.32.0", extra=["--performance-mode"])
    assert server_flags.unsupported_reason(parameters.REGISTRY["performance_mode"], c) is None
    args = resolve({"performance_mode": "throughput"}, c)
    assert args.cli(c.installed) == ["--performance-mode", "throughput"] and args.adjustments == []
    with pytest.raises(ConfigError, match=r"performance_mode='fast' is not allowed; allowed: balanced, interactivity"):
        resolve({"performance_mode": "fast"}, c)


def test_the_parser_not_the_release_decides_whether_performance_mode_is_taken():
    spec = parameters.REGISTRY["performance_mode"]
    # A build that reports an older release but parses the flag (a backport) takes it ...
    assert server_flags.unsupported_reason(spec, ctx("0.16.0", extra=["--performance-mode"])) is None
    # ... and one past the release whose parser lacks it (a fork) drops it, without blaming the release.
    reason = server_flags.unsupported_reason(spec, ctx("0.32.0"))
    assert reason == "--performance-mode is not a flag; the installed vllm 0.32.0 does not accept it"


def test_memory_utilization_maps_to_kv_bytes_on_cpu_and_gmu_on_gpu():
    cpu = ctx()
    assert resolve({"memory_utilization": 0.25}, cpu).flags == {"kv-cache-memory-bytes": 2**28}
    gpu = ctx(hw=H100)
    assert resolve({"memory_utilization": 0.9}, gpu).flags == {"gpu-memory-utilization": 0.9}


def test_booleans_render_both_ways_and_yaml_keys_are_flag_names():
    c = ctx()
    args = resolve(
        {"enable_prefix_caching": False, "enable_chunked_prefill": True, "enforce_eager": True, "dtype": "float32"}, c
    )
    assert args.cli(c.installed) == [
        "--no-enable-prefix-caching",
        "--enable-chunked-prefill",
        "--enforce-eager",
        "--dtype",
        "float32",
    ]
    assert args.flags == {
        "enable-prefix-caching": False,
        "enable-chunked-prefill": True,
        "enforce-eager": True,
        "dtype": "float32",
    }


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


@pytest.mark.parametrize(
    "values, fragment",
    [
        ({"max_num_batched_tokens": 128, "max_num_seqs": 256}, "must be >= max_num_seqs"),
        (
            {"enable_chunked_prefill": False, "max_num_batched_tokens": 1024, "max_model_len": 2048},
            "chunked prefill off",
        ),
        ({"max_num_seqs": 8, "max_num_active_seqs": 16}, "max_num_active_seqs (16)"),
        ({"max_num_active_seqs": 200}, "max_num_seqs (128)"),  # CPU default max_num_seqs
        ({"long_prefill_token_threshold": 4096, "max_model_len": 2048}, "long_prefill_token_threshold"),
        ({"max_model_len": 16384}, "max_position_embeddings (8192)"),
        ({"memory_utilization": 0.01, "max_model_len": 8192}, "less than one 8192-token request"),
    ],
)
def test_known_invalid_combinations_are_caught_before_start(values, fragment):
    problems = check_combination(values, ctx())
    assert len(problems) == 1 and fragment in problems[0]


def test_valid_combination_and_workload_fit():
    c = ctx()
    ok = {
        "max_num_batched_tokens": 2048,
        "max_num_seqs": 64,
        "max_model_len": 2048,
        "enable_chunked_prefill": False,
        "memory_utilization": 0.5,
    }
    assert check_combination(ok, c, longest_request=2048) == []
    assert "does not fit max_model_len" in check_combination(ok, c, longest_request=3000)[0]


def test_every_registry_flag_is_spelled_as_vllm_spells_flags():
    for spec in parameters.PARAMS:
        if spec.flag:
            assert spec.flag.startswith("--") and "_" not in spec.flag


@pytest.mark.parametrize(
    "name, value",
    [
        ("tool_parser_plugin", "/tmp/p.py"),
        ("middleware", "p.Middleware"),
        ("worker_extension_cls", "p.Extension"),
        ("logits_processors", "p.Processor"),
        ("ssl_keyfile", "/tmp/key.pem"),
        ("chat_template", "/tmp/t.jinja"),
        ("download_dir", "/tmp/d"),
        ("hf_token", "t"),
        ("disable_log_stats", True),
        ("gpu_memory_utilization", 0.5),
    ],
)
def test_a_flag_off_the_allow_list_never_reaches_a_server_even_where_vllm_accepts_it(name, value):
    # Trial configurations read back from the database (confirmation) are resolved here too.
    flag = "--" + name.replace("_", "-")
    c = ctx(extra=[flag])
    with pytest.raises(
        ConfigError,
        match=rf"^trial 3: '{name}' is neither a tunable parameter nor a flag on the "
        r"allow list .*; `autotune params` lists what a scenario may set$",
    ):
        resolve({"max_num_seqs": 8, name: value}, c, where="trial 3")


def test_the_api_key_is_refused_with_why():
    with pytest.raises(
        ConfigError,
        match=r"'api_key' cannot be set from a scenario \(the tuner's load client "
        r"sends no key: every request would fail with HTTP 401\)",
    ):
        resolve({"api_key": "secret"}, ctx(extra=["--api-key"]))


@pytest.mark.parametrize("value", ["--tool-parser-plugin=/tmp/p.py", "-O3", "", ["a"], {"backend": "p.f"}])
def test_a_pass_through_value_cannot_pose_as_a_flag(value):
    # After a switch (--scheduler-reserve-full-isl takes no value) the next word would be parsed as a
    # flag of its own. (enforce_eager, the switch this test used, is a registry parameter now: see
    # test_a_registry_switch_takes_only_true_or_false.)
    with pytest.raises(
        ConfigError,
        match=r"scheduler_reserve_full_isl=.* is not allowed; allowed: true or false, "
        r"a number, or a word not starting with '-'",
    ):
        resolve({"scheduler_reserve_full_isl": value}, ctx(extra=["--scheduler-reserve-full-isl"]))


@pytest.mark.parametrize("value", ["--tool-parser-plugin=/tmp/p.py", "-O3", "", ["a"], {"backend": "p.f"}, 1])
def test_a_registry_switch_takes_only_true_or_false(value):
    with pytest.raises(ConfigError, match=r"enforce_eager=.* is not allowed; allowed: true or false$"):
        resolve({"enforce_eager": value}, ctx())


def test_allowed_pass_through_flags_pass_where_the_installed_vllm_has_them():
    values = {"kv_cache_dtype": "fp8", "async_scheduling": False, "stream_interval": 4, "max_num_seqs": 8}
    args = resolve(values, ctx(extra=["--kv-cache-dtype", "--async-scheduling", "--stream-interval"]))
    assert args.flags == {"kv-cache-dtype": "fp8", "async-scheduling": False, "stream-interval": 4, "max-num-seqs": 8}
    with pytest.raises(
        ConfigError,
        match=r"'stream_interval' is on the allow list, but the installed vllm 0.32.0 "
        r"has no --stream-interval",
    ):
        resolve(values, ctx(extra=["--kv-cache-dtype", "--async-scheduling"]))


@pytest.mark.parametrize("successor_set", [False, True])
@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_the_flags_and_the_search_space_follow_one_substitution_rule(version, successor_set):
    # What a server gets for scheduler_delay_factor and what the study samples for it are decided
    # by one rule (server_flags.support), and said in the same words.
    from search import space
    from search.scenario import Domain

    c = ctx(version)
    values = {"max_num_seqs": 8, "scheduler_delay_factor": 0.5} | (
        {"prefill_schedule_interval": 2} if successor_set else {}
    )
    domains = {"max_num_seqs": Domain(low=4, high=8), "scheduler_delay_factor": Domain(low=0.0, high=0.5)} | (
        {"prefill_schedule_interval": Domain(low=1, high=4)} if successor_set else {}
    )
    adj = resolve(values, c).adjustments[0]
    dists, notes = space.active_space(domains, c, "x")
    note = notes[0]
    assert adj.param == "scheduler_delay_factor" and note.startswith("scheduler_delay_factor: ")
    found = server_flags.support(parameters.REGISTRY["scheduler_delay_factor"], c, values)
    if version == "0.33.0" and not successor_set:
        assert adj.action == "substituted" and adj.detail == found.substituted("using --prefill-schedule-interval 6")
        assert note == "scheduler_delay_factor: " + found.substituted("searching --prefill-schedule-interval in [1, 6]")
        assert dists["prefill_schedule_interval"] == IntDistribution(1, 6)
        return
    assert adj.action == "dropped" and adj.detail == found.dropped("not passed")
    assert note == "scheduler_delay_factor: " + found.dropped("not searched")
    why = (
        "--prefill-schedule-interval is set explicitly"
        if version == "0.33.0"
        else "its nearest knob --prefill-schedule-interval is no substitute here"
    )
    assert why in adj.detail and why in note
    assert "scheduler_delay_factor" not in dists
