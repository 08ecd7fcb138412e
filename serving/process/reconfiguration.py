"""The tuner's side of a live reconfiguration: ask a running server of its own to lower its
scheduler limits (the plugin's route and engine utility, `entry/autotune_vllm_plugin/reconfigure.py`
says what is set and what is refused), and read the answer. The request goes through
`vllm_http`, the one home of the tuner's HTTP to a server.

A server without the route (the plugin off, an older tuner's server) answers 404: unavailable,
like every other answer that is not the utility's own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from serving.process.entry.autotune_vllm_plugin.reconfigure import APPLIED, KNOBS, REFUSED, UNAVAILABLE, limit
from serving.process.launch_spec import HOST
from vllm_http import RECONFIGURE, Unanswered, exchange

__all__ = ["KNOBS", "Reconfiguration", "reconfigure", "within_start"]


@dataclass(frozen=True)
class Reconfiguration:
    status: str  # APPLIED, REFUSED or UNAVAILABLE
    reason: str = ""
    values: dict[str, int] = field(default_factory=dict)  # as set (applied)
    start: dict[str, int] = field(default_factory=dict)  # the server's start values, where it said them
    prefix_cache_reset: bool | None = None
    seconds: float = 0.0

    @property
    def applied(self) -> bool:
        return self.status == APPLIED

    def describe(self) -> str:
        return f"{self.status}: {self.reason}" if self.reason else self.status


def parse(status_code: int, body: bytes, seconds: float = 0.0) -> Reconfiguration:
    """The route's answer; anything but the utility's own reads as unavailable."""
    if status_code == 404:
        return Reconfiguration(
            UNAVAILABLE, f"no {RECONFIGURE} on this server (the tuner's plugin is off)", seconds=seconds
        )
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or answer.get("status") not in (APPLIED, REFUSED, UNAVAILABLE):
        return Reconfiguration(UNAVAILABLE, f"HTTP {status_code}: {body[:200]!r}", seconds=seconds)
    return Reconfiguration(
        answer["status"],
        str(answer.get("reason") or ""),
        dict(answer.get("values") or {}),
        dict(answer.get("start") or {}),
        answer.get("prefix_cache_reset"),
        seconds,
    )


def reconfigure(port: int, knobs: Mapping[str, int | None], timeout_s: float = 30.0) -> Reconfiguration:
    """POST the knobs (None: back to the start value) to the tuner's server on `port`."""
    t0 = time.monotonic()
    try:
        status, body = exchange(HOST, port, "POST", RECONFIGURE, json_body=dict(knobs), timeout_s=timeout_s)
    except Unanswered as e:
        return Reconfiguration(UNAVAILABLE, f"POST {RECONFIGURE} failed: {e}", seconds=time.monotonic() - t0)
    return parse(status, body, time.monotonic() - t0)


def within_start(knob: str, value: int, start: int) -> bool:
    """Whether `value` lets the scheduler go no further than the start's `start` (the long-prefill
    threshold's 0 is no threshold: above every number)."""
    return limit(knob, value) <= limit(knob, start)
