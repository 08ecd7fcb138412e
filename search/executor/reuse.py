"""Screening without a restart: which trial may be measured on the server the last trial started,
after lowering its scheduler limits in place (`serving.process.reconfigure`), instead of on a
fresh start. Off unless the scenario's `screening: {reconfigure: true}` turns it on
(docs/measurement.md, "Screening without a restart", says why it is off by default and what the
fidelity A/B measured); the confirmation always starts fresh.

A trial's plan qualifies when its flags are the server's start flags but for `max_num_seqs`,
`max_num_batched_tokens` and `long_prefill_token_threshold`, each at or below the start's value
(where the start left one to vLLM's default, the server itself checks against the value it
resolved; where the plan leaves one to the default and the start did not, the default is not
known here: a fresh start). On a GPU, only where `kv_cache_memory_bytes` fixes the KV cache:
vLLM sizes it by profiling a batch of the start's `max_num_batched_tokens` and `max_num_seqs`, so a
server started at larger limits holds less KV cache than a fresh start of the lowered ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from serving.process import RECONFIGURABLE, VllmServer, within_start

KNOB_FLAGS = {knob.replace("_", "-"): knob for knob in RECONFIGURABLE}  # ServerArgs.flags' keys
KV_FIXED_FLAG = "kv-cache-memory-bytes"
Knobs = dict[str, int | None]  # None: the server's start value


@dataclass
class KeptServer:
    """A trial's server kept running for the next trial, with what it started with."""

    server: VllmServer
    flags: dict[str, Any]  # its start's flags (ServerArgs.flags)
    log_dir: str  # the trial that started it
    start_s: float  # its spawn to /health


def reconfiguration(start_flags: dict[str, Any], plan_flags: dict[str, Any], gpu: bool) -> tuple[Knobs | None, str]:
    """(the knobs to set, "") where a plan with `plan_flags` may be measured on a server started
    with `start_flags`; (None, why not) otherwise."""
    differing = sorted(
        k
        for k in (start_flags.keys() | plan_flags.keys()) - KNOB_FLAGS.keys()
        if start_flags.get(k) != plan_flags.get(k)
    )
    if differing:
        return None, f"its flags differ in {', '.join(differing)}, not only in the scheduler limits"
    if gpu and KV_FIXED_FLAG not in plan_flags:
        return None, (
            "on a GPU the KV cache is profiled at the start's scheduler limits; only "
            "kv_cache_memory_bytes makes it the same as a fresh start's"
        )
    knobs: Knobs = {}
    for flag, knob in KNOB_FLAGS.items():
        asked, started = plan_flags.get(flag), start_flags.get(flag)
        if asked is None and started is not None:
            return None, f"it leaves {knob} to vLLM's default, which the server's start set to {started}"
        if asked is not None and started is not None and not within_start(knob, int(asked), int(started)):
            return None, f"its {knob} {asked} is above the server's start value {started}"
        knobs[knob] = None if asked is None else int(asked)
    return knobs, ""
