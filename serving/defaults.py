"""What vLLM runs with on this machine when no flag sets a value: the batch limits it picks by the
device (`default_batch`), the KV block size (`default_block_size`), the memory share the study
sets itself, and every tunable parameter's value when unset (`unset_value`): the one place these
default numbers live. A baseline is a point of the search space at these values, and a scenario
may state its batch ranges in multiples of them (`MACHINE_DEFAULTED`)."""

from __future__ import annotations

from serving.machine import Hardware

# vLLM's own --gpu-memory-utilization default. The study sets it explicitly: on the CPU build it
# then means 0.92 of the KV budget rather than 0.92 of the machine's RAM (which fails on a
# shared host).
DEFAULT_MEMORY_UTILIZATION = 0.92


# What vLLM uses when max_num_batched_tokens / max_num_seqs are unset (EngineArgs.get_batch_defaults,
# OPENAI_API_SERVER usage context). Needed to check a combination where only one side is set.
def default_batch(hardware: Hardware) -> tuple[int, int]:
    if not hardware.is_gpu:
        return 2048, 128
    mem = hardware.gpus[0].memory_gib
    if mem >= 160:
        return 16384, 1024
    if mem >= 70 and "A100" not in hardware.gpus[0].name:
        return 8192, 1024
    return 2048, 256


# Tokens per KV cache block when --block-size is not given: 16 on GPUs (unless the attention
# backend prefers another), 128 on the CPU build (vllm/platforms/cpu.py).
def default_block_size(hardware: Hardware) -> int:
    return 16 if hardware.is_gpu else 128


# What a server runs with on a tunable parameter the configuration leaves unset, where vLLM's
# parser leaves it to be resolved later (None) or the tuner sets it itself (memory_utilization).
# A baseline is a point of the search space at these values (search.space.effective_params).
_UNSET = {
    "memory_utilization": lambda hw: DEFAULT_MEMORY_UTILIZATION,
    "max_num_batched_tokens": lambda hw: default_batch(hw)[0],
    "max_num_seqs": lambda hw: default_batch(hw)[1],
    "block_size": default_block_size,
    "enable_prefix_caching": lambda hw: True,  # on in the V1 engine for generative models
    "enable_chunked_prefill": lambda hw: True,  # always on in the V1 engine
    "long_prefill_token_threshold": lambda hw: 0,  # off
    "scheduler_delay_factor": lambda hw: 0.0,
    "prefill_schedule_interval": lambda hw: 1,  # every step: the substitute of a 0 delay factor
}


# The ranges a scenario may state in multiples of what vLLM runs when no flag sets them
# (search.scenario.RelativeToDefault): the batch limits, which vLLM picks by the device, so that
# one range is the same search on a CPU and on an H200. (block_size is picked by the device too,
# but takes a few allowed values: choices, not a range.)
MACHINE_DEFAULTED = ("max_num_batched_tokens", "max_num_seqs")


def unset_value(name: str, hardware: Hardware):
    """The value vLLM runs `name` with when no flag sets it (None: not known here)."""
    rule = _UNSET.get(name)
    return rule(hardware) if rule is not None else None
