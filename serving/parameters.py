"""The table of every tunable vLLM parameter and every other flag a scenario may set: what a
scenario may ask of a server, kept apart from how one server's flags are made from it.

For every parameter: its flag, its type and valid range, the release that added it, since when it
does something, when it was removed and what stands in for it. Whether the *installed* vLLM accepts a flag is read
from its own parser (`serving.machine`), never assumed from a version table; the versions
here only explain, in plain words, why something was dropped.

A scenario sets the tunable parameters and the flags on `PASS_THROUGH` (an allow list: each shapes
how fast a server serves, none names code, a file or a credential); anything else is refused
where the scenario is read and again where a server's flags are made (`scenario_flag_problem`).

Each parameter also says what the CPU build does with it (`CpuRule`: passed, dropped or forced to
one value, and why). How a configuration becomes one server's flags by these facts is
`serving.server_flags`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["int", "float", "bool", "choice"]


@dataclass(frozen=True)
class CpuRule:
    """What the tuner does with a parameter on the CPU build: passes it (the default), drops it, or
    passes `value` whatever was asked (`force`), for the reason `why` says."""

    action: Literal["pass", "drop", "force"] = "pass"
    why: str = ""
    value: Any = None


@dataclass(frozen=True)
class ParamSpec:
    name: str
    flag: str | None  # None: rendered by a per-device rule (memory_utilization)
    kind: Kind
    doc: str
    low: float | None = None  # valid range as vLLM validates it (not a search range)
    high: float | None = None
    high_exclusive: bool = False
    choices: tuple = ()  # a choice parameter without any: the installed vLLM's parser's choices
    cpu_choices: tuple = ()  # where the CPU build accepts fewer values
    # The first release whose parser has the flag. The installed parser decides whether a flag is
    # taken; this only says, in the reason a parameter is dropped, that the build predates it.
    added_in: str | None = None
    removed_in: str | None = None
    effective_since: str | None = None  # parses earlier, but does nothing a study measures (`inert` says what)
    effective_until: str | None = None  # parses from this release on, but does nothing a study measures
    inert: str = ""
    cpu: CpuRule = CpuRule()
    substitute: str | None = None
    substitute_value: Callable[[Any], Any] | None = None
    substitute_note: str = ""


def _delay_factor_to_interval(d: float) -> int:
    # The V0 delay held a new prompt back d x (last prompt's latency); a prefill step costs
    # roughly ten decode steps, so that is about 10*d steps of prefill-free decoding.
    return 1 + math.floor(10 * float(d) + 0.5)


PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec(
        "scheduler_delay_factor",
        "--scheduler-delay-factor",
        "float",
        "Delay (x previous prompt latency) before scheduling the next prompt; V0 scheduler only.",
        low=0.0,
        removed_in="0.11.0",
        substitute="prefill_schedule_interval",
        substitute_value=_delay_factor_to_interval,
        substitute_note="prefill admitted once every N engine steps, N = 1 + round(10 x delay factor)",
    ),
    ParamSpec("max_num_seqs", "--max-num-seqs", "int", "Most sequences scheduled in one step (batch width).", low=1),
    ParamSpec(
        "max_num_batched_tokens",
        "--max-num-batched-tokens",
        "int",
        "Token budget of one step: prefill chunk plus decodes.",
        low=1,
    ),
    ParamSpec(
        "memory_utilization",
        None,
        "float",
        "Device memory for weights + KV cache. GPU: --gpu-memory-utilization. CPU build: "
        "--kv-cache-memory-bytes = value x the CPU KV budget (see docs/serving.md).",
        low=0.0,
        high=1.0,
    ),
    ParamSpec(
        "max_model_len",
        "--max-model-len",
        "int",
        "Longest prompt + output a request may have; bounds KV reserved per sequence.",
        low=1,
    ),
    ParamSpec(
        "enable_chunked_prefill",
        "--enable-chunked-prefill",
        "bool",
        "Split long prefills across steps so decodes keep running.",
    ),
    ParamSpec("enable_prefix_caching", "--enable-prefix-caching", "bool", "Reuse KV blocks of shared prompt prefixes."),
    ParamSpec(
        "long_prefill_token_threshold",
        "--long-prefill-token-threshold",
        "int",
        "Prompts longer than this are prefilled at most this many tokens per step (0: off).",
        low=0,
    ),
    ParamSpec(
        "max_num_active_seqs",
        "--max-num-active-seqs",
        "int",
        "Cap on RUNNING requests below max_num_seqs (buffers and graphs stay sized by max_num_seqs, so no recompile).",
        low=1,
    ),
    ParamSpec(
        "block_size",
        "--block-size",
        "choice",
        "Tokens per KV cache block.",
        choices=(8, 16, 32, 64, 128, 256),
        cpu_choices=(32, 64, 128, 256),
    ),
    ParamSpec(
        "prefill_schedule_interval",
        "--prefill-schedule-interval",
        "int",
        "Admit new prefills once every N engine steps.",
        low=1,
        effective_since="0.33.0",
        inert="acts only on data-parallel MoE engines",
    ),
    ParamSpec(
        "watermark",
        "--watermark",
        "float",
        "Fraction of KV blocks kept free when admitting requests.",
        low=0.0,
        high=1.0,
        high_exclusive=True,
    ),
    ParamSpec(
        "performance_mode",
        "--performance-mode",
        "choice",
        "Workload preset: throughput doubles vLLM's default max_num_seqs and max_num_batched_tokens "
        "where they are unset; interactivity captures a CUDA graph for every batch size up to 32 (GPU "
        "only); balanced changes nothing.",
        choices=("balanced", "interactivity", "throughput"),
        added_in="0.17.0",  # vLLM PR #34936
    ),
    ParamSpec(
        "disable_log_requests",
        "--disable-log-requests",
        "bool",
        "Skip the per-request log lines (off by default since 0.12: --enable-log-requests).",
        removed_in="0.12.0",
    ),
    ParamSpec(
        "swap_space",
        "--swap-space",
        "float",
        "CPU swap space (GiB) for preempted sequences.",
        low=0.0,
        removed_in="0.18.0",
    ),
    # The GPU knobs (vLLM's recipes tune TP first). Their pre-start checks are in
    # check_combination; what the CPU build does with each is its CpuRule.
    ParamSpec(
        "tensor_parallel_size",
        "--tensor-parallel-size",
        "int",
        "GPUs each layer is split across: 1/TP of the weights and KV heads per GPU, an all-reduce "
        "per layer. Must divide the attention heads and fit the visible GPUs.",
        low=1,
        cpu=CpuRule(
            "drop",
            "runs each server as one rank on its slot's cores (the tuner gives a "
            "server one slot; ranks would split its cores, each wanting a NUMA node)",
        ),
    ),
    ParamSpec(
        "quantization",
        "--quantization",
        "choice",
        "Weight quantization method: a quantized checkpoint's own (its quantization_config), or fp8 / "
        "bitsandbytes quantizing a full-precision one while loading. Less memory, other kernels.",
    ),
    ParamSpec(
        "kv_cache_dtype",
        "--kv-cache-dtype",
        "choice",
        "Precision of the KV cache: fp8 holds twice the tokens of bf16. CPU build: auto or fp8 "
        "(AVX-512 or AMX, head size a multiple of 32).",
        cpu_choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2"),
    ),
    ParamSpec(
        "enforce_eager",
        "--enforce-eager",
        "bool",
        "No torch.compile and no CUDA graphs: faster starts, usually slower serving. CPU studies run "
        "eager unless set (no CUDA graphs there; false compiles with Dynamo).",
    ),
    ParamSpec(
        "optimization_level",
        "--optimization-level",
        "int",
        "Compilation level: 0 no compile and no graphs, 1 piecewise CUDA graphs, 2-3 full and piecewise "
        "(enforce_eager overrides it). CPU build: 1-3 compile alike, no graphs.",
        low=0,
        high=3,
    ),
    ParamSpec(
        "max_cudagraph_capture_size",
        "--max-cudagraph-capture-size",
        "int",
        "Largest batch replayed as a captured CUDA graph; larger batches run uncaptured.",
        low=1,
        cpu=CpuRule("drop", "captures no CUDA graphs"),
    ),
    ParamSpec(
        "async_scheduling",
        "--async-scheduling",
        "bool",
        "Schedule the next step while the device runs the current one (on by default since 0.14).",
        cpu=CpuRule("force", "turns async scheduling off itself (vllm/platforms/cpu.py)", False),
    ),
    ParamSpec(
        "max_num_partial_prefills",
        "--max-num-partial-prefills",
        "int",
        "Long prompts prefilled concurrently; V0 engine only.",
        low=1,
        removed_in="0.27.0",
        effective_until="0.11.0",
        inert="the V1 engine refuses any value but 1 (NotImplementedError: "
        "Concurrent Partial Prefill is not supported)",
    ),
    ParamSpec(
        "max_long_partial_prefills",
        "--max-long-partial-prefills",
        "int",
        "Of the concurrent partial prefills, how many may be long; V0 engine only.",
        low=1,
        removed_in="0.27.0",
        effective_until="0.11.0",
        inert="the V1 engine refuses any value but 1 (NotImplementedError: Concurrent Partial Prefill "
        "is not supported)",
    ),
)

REGISTRY: dict[str, ParamSpec] = {p.name: p for p in PARAMS}

# The flags a scenario may set besides the tunable parameters, each for the one reason given.
# Every other vLLM flag is refused, whatever the installed vLLM accepts: a plugin, middleware,
# worker class or logits processor would run code in every server; TLS files, an API key, a
# chat template, a download directory or a token change what is served or who may ask, not how
# fast. vLLM's parser checks the values; `resolve` lets no value pose as a flag.
PASS_THROUGH: dict[str, str] = {
    "dtype": "precision of weights and activations (the CPU build serves fp32 where bf16 is emulated)",
    "scheduling_policy": "admission order: fcfs, or priority (the request's priority field)",
    "scheduler_reserve_full_isl": "admit a request only when its whole prompt fits in the KV cache",
    "stream_interval": "tokens per streamed chunk: fewer, larger chunks",
    "attention_backend": "the attention kernels, by vLLM's name for them",
    "kv_cache_memory_bytes": "the KV cache in bytes instead of a share of device memory: vLLM then skips its "
    "memory profiling, so servers started side by side on one GPU size their caches "
    "alike (GPU; on the CPU build memory_utilization sets it)",
    "load_format": "how the study's model is read; dummy: random weights, same timing (set by the "
    "tuner for a model without weights)",
}

# Flags the tuner holds: every server binds to 127.0.0.1 on a port the tuner picks, serves the
# study's model to the tuner's own load client, and never runs code shipped with a model. Off the
# allow list like every other flag; named here so that their refusal says why.
TUNER_OWNED: dict[str, str] = {
    "host": "every server binds to 127.0.0.1",
    "port": "the tuner picks a free port per server",
    "uds": "every server listens on 127.0.0.1 TCP",
    "model": "the study's model comes from --model",
    "trust_remote_code": "the tuner never runs code shipped with a model",
    "config": "a vLLM --config file could set any flag; put its settings in the scenario",
    "api_key": "the tuner's load client sends no key: every request would fail with HTTP 401",
}


def scenario_flag_problem(keys: Iterable[str]) -> str | None:
    """Why one of `keys` may not be set by a scenario (None: each is a tunable parameter or on
    PASS_THROUGH). Names are taken as written: `enforce-eager` is not `enforce_eager`."""
    for name in keys:
        if name in REGISTRY or name in PASS_THROUGH:
            continue
        key = str(name).replace("-", "_").lstrip("_")
        if key in TUNER_OWNED:
            return (
                f"{name!r} cannot be set from a scenario ({TUNER_OWNED[key]}); the tuner owns {', '.join(TUNER_OWNED)}"
            )
        return (
            f"{name!r} is neither a tunable parameter nor a flag on the allow list of flags that "
            f"shape serving performance; `autotune params` lists what a scenario may set"
        )
    return None
