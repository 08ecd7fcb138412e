"""The installed vLLM's own argument parser (read in a subprocess, then cached): the flags it
accepts decide what the tuner passes."""

from serving import parameters
from serving.machine import load_installed
from serving.server_flags import LaunchContext, resolve
from tests.support.fakes import CPU, MODEL


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


def test_every_allowed_flag_is_a_flag_of_the_installed_vllm():
    real = load_installed()
    assert [name for name in parameters.PASS_THROUGH if not real.accepts("--" + name.replace("_", "-"))] == []
    assert not set(parameters.PASS_THROUGH) & (set(parameters.REGISTRY) | set(parameters.TUNER_OWNED))  # each fact once
