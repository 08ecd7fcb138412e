"""The search space a study samples: the scenario's ranges on this machine (a bound may be a
multiple of vLLM's default here), minus what the installed vLLM lacks.

A parameter the installed vLLM cannot take is not sampled at all (a dead dimension only slows
the sampler down); where a substitute acts, its range is sampled instead, mapped through the
registry's rule. Each decision is said once, at the start of the study.
"""

from __future__ import annotations

import math
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from search.scenario import Domain, RelativeToDefault
from serving import REGISTRY, Hardware, LaunchContext, resolve_server_args, support, unset_value

# A dimension of a study's space, as `distribution` makes it: choices, or a numeric range.
Distribution = CategoricalDistribution | IntDistribution | FloatDistribution


class SpaceError(ValueError):
    pass


def _bound(
    name: str, bound: float | RelativeToDefault, hardware: Hardware, integer: bool, up: bool, where: str
) -> float:
    """A range's end as a number on this machine: a multiple of vLLM's default here rounds inward
    to an integer for an integer parameter (low up, high down), so no end leaves the stated range."""
    if not isinstance(bound, RelativeToDefault):
        return bound
    default = unset_value(name, hardware)
    if not isinstance(default, (int, float)) or isinstance(default, bool) or default <= 0:
        raise SpaceError(f"{where}: search_space.{name}: vLLM's default here is {default}: give low/high as numbers")
    value = bound.x_default * default
    if not integer:
        return value
    return math.ceil(value - 1e-9) if up else math.floor(value + 1e-9)


def distribution(name: str, domain: Domain, where: str, hardware: Hardware) -> Distribution:
    """The range `domain` states, on `hardware` (which a multiple of vLLM's default reads)."""
    spec = REGISTRY[name]
    if domain.choices is not None:
        return CategoricalDistribution(domain.choices)
    assert domain.low is not None and domain.high is not None  # `Domain`: a range without choices has both
    integer = spec.kind == "int"
    low = _bound(name, domain.low, hardware, integer, up=True, where=where)
    high = _bound(name, domain.high, hardware, integer, up=False, where=where)
    if domain.relative and not (0 < low <= high if domain.log else low <= high):
        raise SpaceError(
            f"{where}: search_space.{name}: {_stated(domain.low)} to {_stated(domain.high)} vLLM's default "
            f"is [{low:g}, {high:g}] on this machine, an empty range; widen it"
        )
    if integer:
        if low != int(low) or high != int(high):
            raise SpaceError(f"{where}: search_space.{name}: low/high must be integers")
        step = int(domain.step or 1)
        return IntDistribution(int(low), int(high), log=domain.log and step == 1, step=step)
    if spec.kind == "float":
        return FloatDistribution(low, high, log=domain.log, step=domain.step)
    raise SpaceError(f"{where}: search_space.{name} is a {spec.kind} parameter: give choices")


def _machine_range_note(name: str, domain: Domain, dist: Distribution, hardware: Hardware) -> str | None:
    """What a range stated in multiples of vLLM's default is on this machine, said once at the start."""
    if not domain.relative or isinstance(dist, CategoricalDistribution):
        return None
    return (
        f"{name}: [{dist.low:g}, {dist.high:g}] on this machine ({_stated(domain.low)} to "
        f"{_stated(domain.high)} vLLM's default here, {unset_value(name, hardware)})"
    )


def _stated(bound: float | RelativeToDefault | None) -> str:
    return f"{bound.x_default:g}x" if isinstance(bound, RelativeToDefault) else f"{bound:g}"


def _check_in_valid_range(name: str, dist: Distribution, ctx: LaunchContext, where: str) -> None:
    """Every value the sampler may draw must be one vLLM accepts (else: an error now, not later)."""
    probe = list(dist.choices) if isinstance(dist, CategoricalDistribution) else [dist.low, dist.high]
    for value in probe:
        resolve_server_args({name: value}, ctx, where=f"{where}: search_space")


def active_space(space: dict[str, Domain], ctx: LaunchContext, where: str) -> tuple[dict[str, Distribution], list[str]]:
    dists: dict[str, Distribution] = {}
    notes: list[str] = []
    for name, domain in space.items():
        dist = distribution(name, domain, where, ctx.hardware)
        _check_in_valid_range(name, dist, ctx, where)
        if (said := _machine_range_note(name, domain, dist, ctx.hardware)) is not None:
            notes.append(said)
        found = support(REGISTRY[name], ctx, given=space)
        if found.reason is None:
            dists[name] = dist
        elif (sub := found.successor) is not None:
            if isinstance(dist, CategoricalDistribution):  # the successor's range is mapped from this one's
                raise SpaceError(f"{where}: search_space.{name}: {sub.flag} stands in for it here: give low/high")
            low, high = found.carry(dist.low), found.carry(dist.high)
            dists[sub.name] = IntDistribution(low, high) if sub.kind == "int" else FloatDistribution(low, high)
            notes.append(f"{name}: {found.substituted(f'searching {sub.flag} in [{low}, {high}]')}")
        else:
            notes.append(f"{name}: {found.dropped('not searched')}")
    if not dists:
        raise SpaceError(f"{where}: no parameter of search_space is supported by {ctx.installed.label()}")
    return dists, notes


def representable(value: Any, dist: Distribution) -> bool:
    try:
        if isinstance(dist, CategoricalDistribution):
            return value in dist.choices
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if isinstance(dist, IntDistribution) and value != int(value):
            return False
        if not dist.low <= value <= dist.high:
            return False
        step = getattr(dist, "step", None)
        return (
            step is None
            or math.isclose(((value - dist.low) / step) % 1, 0, abs_tol=1e-9)
            or math.isclose(((value - dist.low) / step) % 1, 1, abs_tol=1e-9)
        )
    except TypeError:
        return False


def effective_params(
    config: dict[str, Any], dists: dict[str, Distribution], ctx: LaunchContext, where: str
) -> dict[str, Any]:
    """The point of the space a configuration (a baseline) runs at: on each searched dimension its
    own value as applied, else what vLLM runs with when the flag is unset. A dimension whose value
    lies outside the searched range (or is not known) is left out: that trial then lacks it, and
    the samplers that model the space jointly leave it out of their fit (`search.samplers`)."""
    applied = resolve_server_args(config, ctx, where=where).values
    point = {}
    for name, dist in dists.items():
        value = applied.get(name, unset_value(name, ctx.hardware))
        if value is not None and representable(value, dist):
            point[name] = value
    return point


def suggest(trial: optuna.Trial, dists: dict[str, Distribution], only: dict[str, Any] | None = None) -> dict[str, Any]:
    """Sample every dimension, or (for a baseline: `effective_params`) only those in `only`."""
    params = {}
    for name, dist in dists.items():
        if only is not None and not (name in only and representable(only[name], dist)):
            continue
        if isinstance(dist, CategoricalDistribution):
            params[name] = trial.suggest_categorical(name, dist.choices)
        elif isinstance(dist, IntDistribution):
            params[name] = trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
        else:
            params[name] = trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)
    return params
