"""The one place that knows each tunable vLLM parameter, and every other flag a scenario may set.

For every parameter: its flag, its type and valid range, since when it does something, when
it was removed and what stands in for it. Whether the *installed* vLLM accepts a flag is read
from its own parser (`search.serving.vllm_flags`), never assumed from a version table; the versions
here only explain, in plain words, why something was dropped.

A scenario sets the tunable parameters and the flags on `PASS_THROUGH` (an allow list: each shapes
how fast a server serves, none names code, a file or a credential); anything else is refused
where the scenario is read and again where a server's flags are made (`scenario_flag_problem`).

Each parameter also says what the CPU build does with it (`CpuRule`: passed, dropped or forced to
one value, and why).

`support()` is the one rule for a parameter the installed vLLM or the CPU build cannot take (its
successor stands in, it is forced or dropped, and it is said); `resolve()` turns canonical parameter
values into the flags a server gets by that rule; `check_combination()` catches configurations vLLM
is known to reject, before any server starts: invalid combinations, a tensor parallel size the
devices or the model's heads do not allow, a quantization the checkpoint contradicts, and a KV
cache that cannot hold one request (`memory_budget`, by `search.serving.memory`'s arithmetic).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal

from search.serving import memory
from search.serving.hardware import Hardware
from search.serving.memory import GIB, KvBudget, ModelShape
from search.serving.model_info import ModelInfo
from search.serving.vllm_defaults import DEFAULT_MEMORY_UTILIZATION, default_batch, default_block_size
from search.serving.vllm_flags import InstalledVllm, parse_version

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
    return 1 + int(math.floor(10 * float(d) + 0.5))


PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec(
        "scheduler_delay_factor", "--scheduler-delay-factor", "float",
        "Delay (x previous prompt latency) before scheduling the next prompt; V0 scheduler only.",
        low=0.0, removed_in="0.11.0",
        substitute="prefill_schedule_interval", substitute_value=_delay_factor_to_interval,
        substitute_note="prefill admitted once every N engine steps, N = 1 + round(10 x delay factor)",
    ),
    ParamSpec("max_num_seqs", "--max-num-seqs", "int",
              "Most sequences scheduled in one step (batch width).", low=1),
    ParamSpec("max_num_batched_tokens", "--max-num-batched-tokens", "int",
              "Token budget of one step: prefill chunk plus decodes.", low=1),
    ParamSpec(
        "memory_utilization", None, "float",
        "Device memory for weights + KV cache. GPU: --gpu-memory-utilization. CPU build: "
        "--kv-cache-memory-bytes = value x the CPU KV budget (see README).",
        low=0.0, high=1.0,
    ),
    ParamSpec("max_model_len", "--max-model-len", "int",
              "Longest prompt + output a request may have; bounds KV reserved per sequence.", low=1),
    ParamSpec("enable_chunked_prefill", "--enable-chunked-prefill", "bool",
              "Split long prefills across steps so decodes keep running."),
    ParamSpec("enable_prefix_caching", "--enable-prefix-caching", "bool",
              "Reuse KV blocks of shared prompt prefixes."),
    ParamSpec("long_prefill_token_threshold", "--long-prefill-token-threshold", "int",
              "Prompts longer than this are prefilled at most this many tokens per step (0: off).",
              low=0),
    ParamSpec("max_num_active_seqs", "--max-num-active-seqs", "int",
              "Cap on RUNNING requests below max_num_seqs (buffers and graphs stay sized by "
              "max_num_seqs, so no recompile).", low=1),
    ParamSpec("block_size", "--block-size", "choice", "Tokens per KV cache block.",
              choices=(8, 16, 32, 64, 128, 256), cpu_choices=(32, 64, 128, 256)),
    ParamSpec("prefill_schedule_interval", "--prefill-schedule-interval", "int",
              "Admit new prefills once every N engine steps.", low=1, effective_since="0.33.0",
              inert="acts only on data-parallel MoE engines"),
    ParamSpec("watermark", "--watermark", "float",
              "Fraction of KV blocks kept free when admitting requests.",
              low=0.0, high=1.0, high_exclusive=True),
    ParamSpec("performance_mode", "--performance-mode", "choice",
              "Preset that scales default batch sizes.",
              choices=("balanced", "interactivity", "throughput")),
    ParamSpec("disable_log_requests", "--disable-log-requests", "bool",
              "Skip the per-request log lines (off by default since 0.12: --enable-log-requests).",
              removed_in="0.12.0"),
    ParamSpec("swap_space", "--swap-space", "float",
              "CPU swap space (GiB) for preempted sequences.", low=0.0, removed_in="0.18.0"),
    # The GPU knobs (seeds 001 and 002; vLLM's recipes tune TP first). Their pre-start checks are in
    # check_combination; what the CPU build does with each is its CpuRule.
    ParamSpec("tensor_parallel_size", "--tensor-parallel-size", "int",
              "GPUs each layer is split across: 1/TP of the weights and KV heads per GPU, an all-reduce "
              "per layer. Must divide the attention heads and fit the visible GPUs.", low=1,
              cpu=CpuRule("drop", "runs each server as one rank on its slot's cores (the tuner gives a "
                                  "server one slot; ranks would split its cores, each wanting a NUMA node)")),
    ParamSpec("quantization", "--quantization", "choice",
              "Weight quantization method: a quantized checkpoint's own (its quantization_config), or fp8 / "
              "bitsandbytes quantizing a full-precision one while loading. Less memory, other kernels."),
    ParamSpec("kv_cache_dtype", "--kv-cache-dtype", "choice",
              "Precision of the KV cache: fp8 holds twice the tokens of bf16. CPU build: auto or fp8 "
              "(AVX-512 or AMX, head size a multiple of 32).",
              cpu_choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2")),
    ParamSpec("enforce_eager", "--enforce-eager", "bool",
              "No torch.compile and no CUDA graphs: faster starts, usually slower serving. CPU studies run "
              "eager unless set (no CUDA graphs there; false compiles with Dynamo)."),
    ParamSpec("optimization_level", "--optimization-level", "int",
              "Compilation level: 0 no compile and no graphs, 1 piecewise CUDA graphs, 2-3 full and piecewise "
              "(enforce_eager overrides it). CPU build: 1-3 compile alike, no graphs.", low=0, high=3),
    ParamSpec("max_cudagraph_capture_size", "--max-cudagraph-capture-size", "int",
              "Largest batch replayed as a captured CUDA graph; larger batches run uncaptured.", low=1,
              cpu=CpuRule("drop", "captures no CUDA graphs")),
    ParamSpec("async_scheduling", "--async-scheduling", "bool",
              "Schedule the next step while the device runs the current one (on by default since 0.14).",
              cpu=CpuRule("force", "turns async scheduling off itself (vllm/platforms/cpu.py)", False)),
    ParamSpec("max_num_partial_prefills", "--max-num-partial-prefills", "int",
              "Long prompts prefilled concurrently; V0 engine only.", low=1, removed_in="0.27.0",
              effective_until="0.11.0", inert="the V1 engine refuses any value but 1 (NotImplementedError: "
                                              "Concurrent Partial Prefill is not supported)"),
    ParamSpec("max_long_partial_prefills", "--max-long-partial-prefills", "int",
              "Of the concurrent partial prefills, how many may be long; V0 engine only.", low=1,
              removed_in="0.27.0", effective_until="0.11.0",
              inert="the V1 engine refuses any value but 1 (NotImplementedError: Concurrent Partial Prefill "
                    "is not supported)"),
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
            return (f"{name!r} cannot be set from a scenario ({TUNER_OWNED[key]}); "
                    f"the tuner owns {', '.join(TUNER_OWNED)}")
        return (f"{name!r} is neither a tunable parameter nor a flag on the allow list of flags that "
                f"shape serving performance; `autotune params` lists what a scenario may set")
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
        return {"param": self.param, "action": self.action, "detail": self.detail,
                "replacement": list(self.replacement) if self.replacement else None}


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
        return Support(spec, reason, why_no_successor=f"; its nearest knob {nearest.flag} is no substitute "
                                                      f"here ({nearest_reason})")
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
        if not choices and (parsed := ctx.installed.flags.get(spec.flag)) is not None:
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
    return {spec.flag.removeprefix("--"): value}


def _check_pass_through(name: str, value: Any, ctx: LaunchContext, where: str) -> None:
    """A PASS_THROUGH flag the installed vLLM has, with one value that cannot pose as a flag
    (`enforce_eager: --tool-parser-plugin=...` would become a flag of its own after a switch)."""
    flag = "--" + name.replace("_", "-")
    if not ctx.installed.accepts(flag):
        raise ConfigError(f"{where}: {name!r} is on the allow list, but the installed "
                          f"{ctx.installed.label()} has no {flag}")
    if isinstance(value, (bool, int, float)) or (isinstance(value, str) and value and not value.startswith("-")):
        return
    raise ConfigError(f"{where}: {name}={value!r} is not allowed; allowed: true or false, a number, or a "
                      f"word not starting with '-'")


def resolve(values: dict[str, Any], ctx: LaunchContext, where: str = "config") -> ServerArgs:
    """Canonical values -> the flags this installed vLLM gets, with every drop/substitution said.

    Keys that are not registry parameters pass through as vLLM flags if they are on PASS_THROUGH
    and the installed vLLM accepts them; anything else is an error. Checked here as well as where
    a scenario is read: stored trial configurations come back here too.
    """
    if (problem := scenario_flag_problem(values)) is not None:
        raise ConfigError(f"{where}: {problem}")
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
                adjustments.append(Adjustment(name, "forced", f"{found.reason}; passed as {spec.cpu.value!r}",
                                              (name, spec.cpu.value)))
        elif (sub := found.successor) is not None:
            new_value = found.carry(value)
            applied[sub.name] = new_value
            adjustments.append(Adjustment(name, "substituted", found.substituted(f"using {sub.flag} {new_value}"),
                                          (sub.name, new_value)))
        else:
            adjustments.append(Adjustment(name, "dropped", found.dropped("not passed")))
    flags: dict[str, Any] = {}
    for name, value in applied.items():
        flags.update(_render(name, value, ctx))
    return ServerArgs(values=applied, flags=flags, adjustments=adjustments)


def _batch(values: dict[str, Any], ctx: LaunchContext, max_model_len: int) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as vLLM will run them: set, or its defaults for this
    hardware (doubled by performance_mode throughput), max_num_seqs capped by the token budget and
    the token budget raised to max_model_len with chunked prefill off."""
    default_mnbt, default_mns = default_batch(ctx.hardware)
    if values.get("performance_mode") == "throughput":
        default_mnbt, default_mns = 2 * default_mnbt, 2 * default_mns
    mnbt = values.get("max_num_batched_tokens")
    mns = values.get("max_num_seqs")
    effective_mns = mns if mns is not None else min(default_mns, mnbt or default_mnbt)
    if mnbt is None:
        mnbt = default_mnbt if values.get("enable_chunked_prefill", True) is not False else max(max_model_len,
                                                                                               default_mnbt)
    return mnbt, effective_mns


def memory_budget(values: dict[str, Any], ctx: LaunchContext) -> KvBudget | None:
    """The KV cache one device will hold for `values` (as applied), by `memory`'s arithmetic. None
    where it cannot be told: the CPU build without memory_utilization (vLLM then sizes the cache
    from the node's RAM), a model or a format the arithmetic does not know."""
    dtype = memory.serving_dtype(ctx.model.config_dtype, values.get("dtype") or ctx.dtype)
    element = memory.cache_bytes(values.get("kv_cache_dtype"), dtype)
    if element is None:
        return None
    block = values.get("block_size") or default_block_size(ctx.hardware)
    if not ctx.hardware.is_gpu:
        util = values.get("memory_utilization")
        if util is None:
            return None
        m = ctx.model
        return memory.cpu_budget(ctx.cpu_kv_bytes(util),
                                 memory.kv_bytes_per_token(m.num_layers, m.num_kv_heads, m.head_dim, element), block)
    if ctx.shape is None or not ctx.hardware.gpus:
        return None
    mnbt, mns = _batch(values, ctx, values.get("max_model_len") or ctx.model.max_position_embeddings)
    return memory.gpu_budget(
        ctx.shape, device_bytes=int(ctx.hardware.gpus[0].memory_gib * GIB),
        utilization=values.get("memory_utilization", DEFAULT_MEMORY_UTILIZATION), dtype=dtype, element_bytes=element,
        block_size=block, batched_tokens=mnbt, seqs=mns, tp=values.get("tensor_parallel_size") or 1,
        cuda_graphs=not values.get("enforce_eager") and values.get("optimization_level") != 0,
        quantization=values.get("quantization"))


# Methods vLLM lets take over another method's checkpoint (its `override_quantization_method`),
# besides a method's own kernel variants (awq -> awq_marlin, gptq -> gptq_marlin).
_TAKES_OVER = frozenset({"moe_wna16", "inc", "humming", "marlin", "ipex"})


def device_problems(values: dict[str, Any], ctx: LaunchContext) -> list[str]:
    """What the visible devices, the model's config.json or the installed build rule out for the
    GPU knobs: vLLM's own checks at start (ModelConfig, the parallel linear layers, the CPU
    attention backend), run here without starting it."""
    problems: list[str] = []
    hw, shape = ctx.hardware, ctx.shape
    tp = values.get("tensor_parallel_size") or 1
    if tp > 1:
        if tp > len(hw.gpus):
            problems.append(f"tensor_parallel_size {tp} needs {tp} GPUs; {len(hw.gpus)} visible ({hw.describe()}; "
                            f"CUDA_VISIBLE_DEVICES decides which)")
        if shape is not None and shape.heads % tp:
            problems.append(f"tensor_parallel_size {tp} does not divide the model's {shape.heads} attention heads")
        kv = shape.kv_heads if shape is not None else ctx.model.num_kv_heads
        if (kv % tp) if kv >= tp else (tp % kv):
            problems.append(f"tensor_parallel_size {tp} must divide the model's {kv} KV heads, or be a multiple "
                            f"of them (each head then replicated)")
        if shape is not None and shape.intermediate % tp:
            problems.append(f"tensor_parallel_size {tp} does not divide the model's MLP width ({shape.intermediate})")
    kv_dtype = values.get("kv_cache_dtype") or "auto"
    if kv_dtype.startswith("fp8") and not hw.is_gpu:
        if not {"avx512f", "amx_tile"} & hw.cpu_flags:
            problems.append(f"kv_cache_dtype {kv_dtype} on the CPU build needs AVX-512 or AMX; this CPU "
                            f"({hw.cpu_model}) has neither")
        if ctx.model.head_dim % 32:
            problems.append(f"kv_cache_dtype {kv_dtype} on the CPU build needs a head size divisible by 32; "
                            f"the model's is {ctx.model.head_dim}")
    method = values.get("quantization")
    own = shape.quantization if shape is not None else None
    if method and own is not None and own.method and method != own.method and own.method not in method \
            and method not in _TAKES_OVER:
        problems.append(f"quantization {method} contradicts the checkpoint's quantization_config ({own.method}): "
                        f"vLLM refuses the pair")
    if method and shape is not None and own is None and method in memory.NEEDS_QUANTIZED_CHECKPOINT:
        problems.append(f"quantization {method} loads only a checkpoint quantized with it; the model's config.json "
                        f"has no quantization_config")
    return problems


def check_combination(values: dict[str, Any], ctx: LaunchContext,
                      longest_request: int | None = None) -> list[str]:
    """Known-invalid combinations (vLLM's own startup checks, run here in milliseconds)."""
    problems: list[str] = []
    model_max = ctx.model.max_position_embeddings
    mml = values.get("max_model_len") or model_max
    mnbt = values.get("max_num_batched_tokens")
    mns = values.get("max_num_seqs")
    chunked = values.get("enable_chunked_prefill", True) is not False
    if mml > model_max:
        problems.append(f"max_model_len ({mml}) is greater than the model's max_position_embeddings "
                        f"({model_max})")
    if mnbt is not None and mns is not None and mnbt < mns:
        problems.append(f"max_num_batched_tokens ({mnbt}) must be >= max_num_seqs ({mns})")
    if not chunked and mnbt is not None and mnbt < mml:
        problems.append(f"max_num_batched_tokens ({mnbt}) is smaller than max_model_len ({mml}) "
                        "with chunked prefill off: longer prompts could never be scheduled")
    effective_mns = _batch(values, ctx, mml)[1]
    active = values.get("max_num_active_seqs")
    if active is not None and active > effective_mns:
        problems.append(f"max_num_active_seqs ({active}) cannot be greater than max_num_seqs "
                        f"({effective_mns})")
    lpt = values.get("long_prefill_token_threshold")
    if lpt is not None and lpt > mml:
        problems.append(f"long_prefill_token_threshold ({lpt}) cannot be greater than "
                        f"max_model_len ({mml})")
    if longest_request is not None and longest_request > mml:
        problems.append(f"the workload's longest request ({longest_request} tokens, prompt + output) "
                        f"does not fit max_model_len ({mml}); vLLM would reject or truncate it")
    problems += device_problems(values, ctx)
    budget = memory_budget(values, ctx)
    if budget is not None and not budget.holds(mml):
        util = values.get("memory_utilization", DEFAULT_MEMORY_UTILIZATION)
        held = f"a KV cache of {budget.tokens:,} tokens" if budget.kv_bytes > 0 else "no memory for the KV cache"
        problems.append(f"memory_utilization {util:.2f} leaves {held}, less than one {mml}-token request needs "
                        f"({budget.explain()})")
    return problems
