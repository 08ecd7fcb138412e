"""The one place that knows each tunable vLLM parameter and every other flag a scenario may set,
and which of them, as what flags, one server gets on the installed vLLM.

For every parameter: its flag, its type and valid range, the release that added it, since when it
does something, when it was removed and what stands in for it. Whether the *installed* vLLM accepts a flag is read
from its own parser (`serving.machine`), never assumed from a version table; the versions
here only explain, in plain words, why something was dropped.

A scenario sets the tunable parameters and the flags on `PASS_THROUGH` (an allow list: each shapes
how fast a server serves, none names code, a file or a credential); anything else is refused
where the scenario is read and again where a server's flags are made (`scenario_flag_problem`).

Each parameter also says what the CPU build does with it (`CpuRule`: passed, dropped or forced to
one value, and why).

How a configuration becomes the flags one server gets is here too, by the same facts:
`support()` is the one rule for a parameter the installed vLLM or the CPU build cannot take (its
successor stands in, it is forced or dropped, and it is said); `resolve()` applies it to every
value and renders the flags (`ServerArgs`, with each `Adjustment` said), refusing anything that
is neither a parameter here nor on the pass-through allow list. What is rejected before any
start is `serving.checks`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from serving.machine import Hardware, InstalledVllm, parse_version
from serving.model.info import ModelInfo
from serving.model.memory import ModelShape

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


class ConfigError(ValueError):
    """A configuration that vLLM would reject, found before starting anything."""


@dataclass(frozen=True)
class LaunchContext:
    installed: InstalledVllm
    hardware: Hardware
    model: ModelInfo
    cpu_kv_budget_bytes: int  # what memory_utilization=1.0 means on the CPU build
    dtype: str | None = None  # serving dtype, for the KV size check
    shape: ModelShape | None = None  # the model's sizes for the memory arithmetic (None: not known)

    def version_at_least(self, v: str) -> bool:
        return self.installed.version_tuple >= parse_version(v)

    def cpu_kv_bytes(self, utilization: float) -> int:
        """--kv-cache-memory-bytes for a memory_utilization on the CPU build."""
        return int(utilization * self.cpu_kv_budget_bytes)


@dataclass(frozen=True)
class Adjustment:
    param: str
    action: Literal["dropped", "substituted", "forced"]
    detail: str
    replacement: tuple[str, Any] | None = None

    def as_dict(self) -> dict:
        return {
            "param": self.param,
            "action": self.action,
            "detail": self.detail,
            "replacement": list(self.replacement) if self.replacement else None,
        }


@dataclass
class ServerArgs:
    """What one server gets: canonical values as applied, and the flags that carry them."""

    values: dict[str, Any]
    flags: dict[str, Any]  # long option without "--" -> value; exactly the `vllm serve --config` keys
    adjustments: list[Adjustment] = field(default_factory=list)

    def cli(self, installed: InstalledVllm) -> list[str]:
        args: list[str] = []
        for key, value in self.flags.items():
            flag = "--" + key
            if isinstance(value, bool):
                if value:
                    args.append(flag)
                elif installed.accepts("--no-" + key):
                    args.append("--no-" + key)
            else:
                args += [flag, str(value)]
        return args


def _version_reason(spec: ParamSpec, ctx: LaunchContext) -> str | None:
    label = ctx.installed.label()
    if spec.flag is not None and not ctx.installed.accepts(spec.flag):
        if spec.added_in and not ctx.version_at_least(spec.added_in):
            return f"{spec.flag} was added in vLLM {spec.added_in}; the installed {label} does not accept it"
        since = f"removed in vLLM {spec.removed_in}" if spec.removed_in else "not a flag"
        return f"{spec.flag} is {since}; the installed {label} does not accept it"
    if spec.effective_since and not ctx.version_at_least(spec.effective_since):
        return f"{spec.flag} parses in {label} but {spec.inert} before {spec.effective_since}"
    if spec.effective_until and ctx.version_at_least(spec.effective_until):
        return f"{spec.flag} parses in {label} but {spec.inert} since {spec.effective_until}"
    return None


def unsupported_reason(spec: ParamSpec, ctx: LaunchContext) -> str | None:
    """Why this parameter cannot be passed as asked here (the installed vLLM lacks it, or the CPU
    build drops or forces it), or None if it can."""
    if (reason := _version_reason(spec, ctx)) is not None:
        return reason
    if not ctx.hardware.is_gpu and spec.cpu.action != "pass":
        return f"the CPU build {spec.cpu.why}"
    return None


@dataclass(frozen=True)
class Support:
    """What the installed vLLM makes of one parameter: takes it as is (`reason` None), lets its
    successor carry the value (`successor`, the value mapped by `carry`), or neither: dropped,
    with `why_no_successor`. The one rule for the flags a server gets and the space a study samples."""

    spec: ParamSpec
    reason: str | None = None  # why the installed vLLM (or the CPU build) cannot take the parameter as asked
    successor: ParamSpec | None = None
    why_no_successor: str = ""
    forced: bool = False  # the CPU build takes spec.cpu.value whatever was asked (not searched)

    def carry(self, value: Any) -> Any:
        """The successor's value for the parameter's `value`."""
        return self.spec.substitute_value(value) if self.spec.substitute_value else value

    def substituted(self, doing: str) -> str:
        return f"{self.reason}; {doing} instead ({self.spec.substitute_note})"

    def dropped(self, not_doing: str) -> str:
        return f"{self.reason}{self.why_no_successor}; {not_doing}"


def support(spec: ParamSpec, ctx: LaunchContext, given: Iterable[str]) -> Support:
    """How the installed vLLM supports `spec`, given the parameters also set (`given`): a successor
    the user set themselves keeps their value and stands in for nothing."""
    reason = unsupported_reason(spec, ctx)
    if reason is not None and _version_reason(spec, ctx) is None and spec.cpu.action == "force":
        return Support(spec, reason, forced=True)
    nearest = REGISTRY.get(spec.substitute) if spec.substitute else None
    if reason is None or nearest is None:
        return Support(spec, reason)
    if (nearest_reason := unsupported_reason(nearest, ctx)) is not None:
        return Support(
            spec, reason, why_no_successor=f"; its nearest knob {nearest.flag} is no substitute here ({nearest_reason})"
        )
    if nearest.name in given:
        return Support(spec, reason, why_no_successor=f"; {nearest.flag} is set explicitly")
    return Support(spec, reason, successor=nearest)


def _check_value(spec: ParamSpec, value: Any, ctx: LaunchContext, where: str) -> Any:
    def bad(allowed: str) -> ConfigError:
        return ConfigError(f"{where}: {spec.name}={value!r} is not allowed; allowed: {allowed}")

    if spec.kind == "bool":
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if spec.kind == "choice":
        choices = spec.cpu_choices if (spec.cpu_choices and not ctx.hardware.is_gpu) else spec.choices
        if not choices and spec.flag is not None and (parsed := ctx.installed.flags.get(spec.flag)) is not None:
            choices = parsed.choices or ()
        if choices and value not in choices:
            raise bad(", ".join(map(str, choices)))
        if not choices and not (isinstance(value, str) and value and not value.startswith("-")):
            raise bad("a word not starting with '-'")  # vLLM's parser checks the word
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad(f"a number ({spec.kind})")
    if spec.kind == "int":
        if float(value) != int(value):
            raise bad("an integer")
        value = int(value)
    else:
        value = float(value)
    if spec.low is not None and value < spec.low:
        raise bad(f">= {spec.low:g}")
    if spec.high is not None and (value >= spec.high if spec.high_exclusive else value > spec.high):
        raise bad(f"{'<' if spec.high_exclusive else '<='} {spec.high:g}")
    if spec.name == "memory_utilization" and value <= 0:
        raise bad("a fraction in (0, 1]")
    return value


def _render(name: str, value: Any, ctx: LaunchContext) -> dict[str, Any]:
    spec = REGISTRY.get(name)
    if spec is None:
        return {name.replace("_", "-"): value}
    if name == "memory_utilization":
        if ctx.hardware.is_gpu:
            return {"gpu-memory-utilization": value}
        return {"kv-cache-memory-bytes": ctx.cpu_kv_bytes(value)}
    assert spec.flag is not None  # only memory_utilization has none: its flag is per device, above
    return {spec.flag.removeprefix("--"): value}


def _check_pass_through(name: str, value: Any, ctx: LaunchContext, where: str) -> None:
    """A PASS_THROUGH flag the installed vLLM has, with one value that cannot pose as a flag
    (`enforce_eager: --tool-parser-plugin=...` would become a flag of its own after a switch)."""
    flag = "--" + name.replace("_", "-")
    if not ctx.installed.accepts(flag):
        raise ConfigError(
            f"{where}: {name!r} is on the allow list, but the installed {ctx.installed.label()} has no {flag}"
        )
    if isinstance(value, (bool, int, float)) or (isinstance(value, str) and value and not value.startswith("-")):
        return
    raise ConfigError(
        f"{where}: {name}={value!r} is not allowed; allowed: true or false, a number, or a word not starting with '-'"
    )


def resolve(values: dict[str, Any], ctx: LaunchContext, where: str = "config") -> ServerArgs:
    """Canonical values -> the flags this installed vLLM gets, with every drop/substitution said.

    Keys that are not registry parameters pass through as vLLM flags if they are on PASS_THROUGH
    and the installed vLLM accepts them; anything else is an error. Checked here as well as where
    a scenario is read: stored trial configurations come back here too.
    """
    if (problem := scenario_flag_problem(values)) is not None:
        raise ConfigError(f"{where}: {problem}")
    if not ctx.hardware.is_gpu and values.get("kv_cache_memory_bytes") is not None:
        raise ConfigError(
            f"{where}: kv_cache_memory_bytes is for GPUs; on the CPU build memory_utilization sets "
            f"--kv-cache-memory-bytes (a share of the tuner's KV budget): set that instead"
        )
    applied: dict[str, Any] = {}
    adjustments: list[Adjustment] = []
    for name, value in values.items():
        if value is None:
            continue
        spec = REGISTRY.get(name)
        if spec is None:
            _check_pass_through(name, value, ctx, where)
            applied[name] = value
            continue
        value = _check_value(spec, value, ctx, where)
        found = support(spec, ctx, given=values)
        if found.reason is None:
            applied[name] = value
        elif found.forced:
            applied[name] = spec.cpu.value
            if value != spec.cpu.value:
                adjustments.append(
                    Adjustment(name, "forced", f"{found.reason}; passed as {spec.cpu.value!r}", (name, spec.cpu.value))
                )
        elif (sub := found.successor) is not None:
            new_value = found.carry(value)
            applied[sub.name] = new_value
            adjustments.append(
                Adjustment(
                    name, "substituted", found.substituted(f"using {sub.flag} {new_value}"), (sub.name, new_value)
                )
            )
        else:
            adjustments.append(Adjustment(name, "dropped", found.dropped("not passed")))
    flags: dict[str, Any] = {}
    for name, value in applied.items():
        flags.update(_render(name, value, ctx))
    return ServerArgs(values=applied, flags=flags, adjustments=adjustments)
