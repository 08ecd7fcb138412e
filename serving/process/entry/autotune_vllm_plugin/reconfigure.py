"""Lower a drained server's scheduler limits in place: the engine utility `autotune_reconfigure`.

vLLM has no API to change `max_num_seqs`, `max_num_batched_tokens` or
`long_prefill_token_threshold` once a server runs, but its EngineCore answers a utility call by
the method's name (`EngineCore._handle_client_request`, UTILITY: `getattr(self, method_name)`),
between two scheduler steps, on the thread that schedules. This concern adds that method to the
EngineCore class; the API server's route that calls it is `route`.

What the scheduler reads, and so what is set (vLLM 0.26 and 0.32; anything else reads as a shape
this does not know, and the utility says it is unavailable):
- `max_num_seqs`: `Scheduler.max_num_running_reqs` (0.26: the admission into RUNNING; 0.32: the
  assertion on the batch) and, in 0.32, `Scheduler.max_num_active_reqs` (its admission, unless
  `max_num_active_seqs` sets it apart);
- `max_num_batched_tokens`: `Scheduler.max_num_scheduled_tokens` (each step's token budget, where
  no `max_num_scheduled_tokens` sets it apart) and, in 0.32, `scheduler_config.max_num_batched_tokens`
  (each step's input budget);
- `long_prefill_token_threshold`: `scheduler_config.long_prefill_token_threshold`, read each step
  (0: no threshold).
The model runner's buffers, CUDA graphs and compiled ranges were sized by the start's values and
serve any batch within them. Only down: a limit above the start's would outgrow them.

Refused: a knob this does not know, a value above the start's (for the threshold, 0 is no limit:
above every number), a value vLLM's own start would refuse (`max_num_batched_tokens` below
`max_num_seqs`), and a server that is not drained (a request running or waiting, whose batch the
new limits would cut). Where it applies, the prefix cache is reset as well, so the next
measurement finds it as a fresh start does.

Standard library only: vLLM's classes come in as the objects it passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from . import hooks

ENGINE_CORE = "vllm.v1.engine.core"
METHOD = "autotune_reconfigure"
MAX_NUM_SEQS, MAX_NUM_BATCHED_TOKENS, LONG_PREFILL = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "long_prefill_token_threshold",
)
KNOBS = (MAX_NUM_SEQS, MAX_NUM_BATCHED_TOKENS, LONG_PREFILL)
APPLIED, REFUSED, UNAVAILABLE = "applied", "refused", "unavailable"
START_ATTR = "_autotune_start_limits"  # the values the engine started with, kept on the EngineCore


class Refused(ValueError):
    """Why the asked values are not set."""


def limit(knob: str, value: int) -> float:
    """How far a value lets the scheduler go: the threshold's 0 means no threshold at all."""
    return math.inf if knob == LONG_PREFILL and value == 0 else float(value)


def checked(asked: Mapping[str, Any], start: Mapping[str, int], running: int, waiting: int) -> dict[str, int]:
    """The values to set: each asked one (a knob left out, or None: its start value), or Refused."""
    unknown = sorted(set(asked) - set(KNOBS))
    if unknown:
        raise Refused(f"unknown knob {', '.join(unknown)}; known: {', '.join(KNOBS)}")
    if running or waiting:
        raise Refused(f"the server is not drained ({running} running, {waiting} waiting)")
    values: dict[str, int] = {}
    for knob in KNOBS:
        value = asked.get(knob)
        if value is None:
            values[knob] = start[knob]
            continue
        lowest = 0 if knob == LONG_PREFILL else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
            raise Refused(f"{knob} {value!r} is not an integer of at least {lowest}")
        if limit(knob, value) > limit(knob, start[knob]):
            raise Refused(f"{knob} {value} is above the value the server started with ({start[knob]})")
        values[knob] = value
    if values[MAX_NUM_BATCHED_TOKENS] < values[MAX_NUM_SEQS]:
        raise Refused(
            f"max_num_batched_tokens {values[MAX_NUM_BATCHED_TOKENS]} is below max_num_seqs {values[MAX_NUM_SEQS]}"
        )
    return values


def shape_problem(scheduler: Any) -> str | None:
    """Why this scheduler is not one whose limits `apply` knows how to set (None: it is)."""
    config = getattr(scheduler, "scheduler_config", None)
    for knob in KNOBS:
        if not isinstance(getattr(config, knob, None), int):
            return f"the scheduler's config has no integer {knob}"
    for name in ("max_num_running_reqs", "max_num_scheduled_tokens"):
        if not isinstance(getattr(scheduler, name, None), int):
            return f"the scheduler has no integer {name}"
    if getattr(config, "max_num_scheduled_tokens", None) is not None:
        return "max_num_scheduled_tokens sets the token budget apart from max_num_batched_tokens"
    if not callable(getattr(scheduler, "get_request_counts", None)):
        return "the scheduler has no get_request_counts"
    return None


def apply(scheduler: Any, values: Mapping[str, int]) -> None:
    """Set the limits where this vLLM's scheduler reads them (the module docstring lists them)."""
    config = scheduler.scheduler_config
    config.max_num_seqs = scheduler.max_num_running_reqs = values[MAX_NUM_SEQS]
    if hasattr(scheduler, "max_num_active_reqs"):
        active = getattr(config, "max_num_active_seqs", None)
        scheduler.max_num_active_reqs = active if active is not None else values[MAX_NUM_SEQS]
    config.max_num_batched_tokens = scheduler.max_num_scheduled_tokens = values[MAX_NUM_BATCHED_TOKENS]
    config.long_prefill_token_threshold = values[LONG_PREFILL]


def reconfigure(engine: Any, asked: Mapping[str, Any], say: Callable[[str], None]) -> dict[str, Any]:
    """The utility's answer: {"status": applied | refused | unavailable, "reason", "values",
    "start", "prefix_cache_reset"}. Never raises for a refusal: the caller reads why."""
    scheduler: Any = getattr(engine, "scheduler", None)  # vLLM's; `shape_problem` checks what is used
    problem = shape_problem(scheduler)
    if problem is not None:
        say(f"reconfiguration unavailable: {problem}")
        return {"status": UNAVAILABLE, "reason": problem}
    start = getattr(engine, START_ATTR, None)
    if start is None:  # the first call: nothing has changed them yet
        start = {k: getattr(scheduler.scheduler_config, k) for k in KNOBS}
        setattr(engine, START_ATTR, start)
    running, waiting = scheduler.get_request_counts()
    try:
        values = checked(asked, start, running, waiting)
    except Refused as e:
        return {"status": REFUSED, "reason": str(e), "start": dict(start)}
    apply(scheduler, values)
    reset = getattr(engine, "reset_prefix_cache", None)
    try:
        prefix_cache_reset = bool(reset()) if callable(reset) else None
    except Exception:  # the limits are set; the caller reads that the cache was not reset
        prefix_cache_reset = False
    say(f"scheduler limits set to {values} (started with {start}); prefix cache reset: {prefix_cache_reset}")
    return {"status": APPLIED, "values": values, "start": dict(start), "prefix_cache_reset": prefix_cache_reset}


def add_utility(module: ModuleType, say: Callable[[str], None]) -> None:
    engine_core = getattr(module, "EngineCore", None)
    if not isinstance(engine_core, type):
        say(f"no EngineCore in {ENGINE_CORE}: no reconfiguration utility")
        return

    def autotune_reconfigure(self, asked: dict) -> dict:
        return reconfigure(self, asked, say)

    setattr(engine_core, METHOD, autotune_reconfigure)


def install(say: Callable[[str], None]) -> None:
    hooks.when_imported(ENGINE_CORE, lambda m: add_utility(m, say))
