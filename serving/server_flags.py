"""How a configuration becomes the flags one server gets on the installed vLLM, by the facts of
the parameter table (`serving.parameters`); its own room because it reads the installed vLLM and
the device, where the table reads neither.

`support()` is the one rule for a parameter the installed vLLM or the CPU build cannot take (its
successor stands in, it is forced or dropped, and it is said); `resolve()` applies it to every
value and renders the flags (`ServerArgs`, with each `Adjustment` said), refusing anything that
is neither a parameter of the table nor on the pass-through allow list. What is rejected before any
start is `serving.checks`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from serving.machine import Hardware, InstalledVllm, parse_version
from serving.model.info import ModelInfo
from serving.model.memory import ModelShape
from serving.parameters import REGISTRY, ParamSpec, scenario_flag_problem


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
