"""Where a server start's seconds went, read from vLLM's own log lines and their timestamps.

A start passes milestones that vLLM logs, each from the process that reaches it:

    import           spawn -> the API server's first log line (Python, torch and vLLM imported)
    engine process   -> the EngineCore process's first line (spawned, imported, configured)
    worker process   -> "Starting to load model" (the worker spawned and imported: CPU, or
                        several GPUs; a single GPU loads in the EngineCore process)
    model load       -> "Loading weights took" (0.32) / "Model loading took" (0.26 GPU)
    KV cache         -> "KV cache size: N tokens" (profiling, and torch.compile on a GPU: the
                        profile run is the first forward pass)
    warm-up          -> "init engine (profile, create kv cache, warmup model) took" (CUDA
                        graph capture on a GPU)
    API server       -> "Starting vLLM server on" (0.32) / "Starting vLLM API server 0 on" (0.26)
    health           -> /health answered 200 (the tuner's clock)
    first token      -> the first token of the first request the tuner sent (the tuner's clock)

Each phase runs from the previous milestone found to its own. A milestone whose line is missing
(another version's wording, a log cut short) is reported as None, and its seconds fall to the
next phase found, so the phases found always add up to the start. vLLM stamps lines to the
second (`%m-%d %H:%M:%S`, local time), so a phase from the log is known to about a second; a
line is placed at the middle of its second, and never before the milestone before it or after
the server answered. vLLM's own finer figures (weights, torch.compile, graph capture, engine
init) are kept beside the phases as it reported them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

# Optional process prefix since 0.10 ("(APIServer pid=1) "), then level and the local time.
_STAMP = re.compile(
    r"^(?:\((?P<proc>[\w-]+) pid=\d+\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<month>\d\d)-(?P<day>\d\d) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d) "
)


@dataclass(frozen=True)
class Milestone:
    phase: str  # the phase that ends at it
    pattern: re.Pattern  # the line that marks it, in every version's wording


MILESTONES: tuple[Milestone, ...] = (
    Milestone("import", re.compile(r"\[[\w.]+:\d+\]")),  # any vLLM line: the API server is up
    Milestone("engine process", re.compile(r"^\(EngineCore[\w-]* pid=|Initializing a V1 LLM engine")),
    Milestone("worker process", re.compile(r"Starting to load model")),
    Milestone("model load", re.compile(r"Loading weights took|Model loading took")),
    Milestone("KV cache", re.compile(r"KV cache size: [\d,]+ tokens|# (?:GPU|cuda) blocks: \d+")),
    Milestone("warm-up", re.compile(r"init engine \(profile, create kv cache, warmup model\) took")),
    Milestone("API server", re.compile(r"Starting vLLM (?:API )?server (?:\d+ )?on ")),
)
HEALTH, FIRST_TOKEN = "health", "first token"
PHASES = (*tuple(m.phase for m in MILESTONES), HEALTH, FIRST_TOKEN)

# vLLM's own durations, in seconds, where it logs them.
_REPORTED = {
    "weights_s": re.compile(
        r"Loading weights took ([\d.]+) s|Model loading took [\d.]+ GiB(?: memory)? and ([\d.]+) s"
    ),
    "torch_compile_s": re.compile(r"torch\.compile (?:takes|took) ([\d.]+) s in total|\(compilation: ([\d.]+) s"),
    "cuda_graphs_s": re.compile(r"Graph capturing finished in ([\d.]+) sec"),
    "engine_init_s": re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"),
}


@dataclass(frozen=True)
class StartAnatomy:
    phases: dict[str, float | None]  # in start order; None: its milestone was not in the log
    reported: dict[str, float] = field(default_factory=dict)  # vLLM's own figures

    @property
    def missing(self) -> list[str]:
        return [name for name, s in self.phases.items() if s is None]

    def with_first_token(self, after_health_s: float | None) -> StartAnatomy:
        """With the first token served `after_health_s` after /health answered (None: none was)."""
        if after_health_s is None:
            return self
        return replace(self, phases={**self.phases, FIRST_TOKEN: max(after_health_s, 0.0)})

    def as_dict(self) -> dict[str, Any]:
        """What a trial stores under `timings["start_anatomy"]`."""
        return {
            "phases": {k: None if v is None else round(v, 2) for k, v in self.phases.items()},
            "vllm_reported": self.reported,
        }


def _stamp_s(line: str, spawned_at: datetime) -> float | None:
    """Seconds from the spawn to the middle of the second the line was stamped in."""
    m = _STAMP.match(line)
    if m is None:
        return None
    year = spawned_at.year + (1 if int(m["month"]) < spawned_at.month else 0)  # a start across New Year
    at = datetime(year, int(m["month"]), int(m["day"]), int(m["h"]), int(m["m"]), int(m["s"]))
    return (at - spawned_at.replace(tzinfo=None)).total_seconds() + 0.5


def milestones(log_text: str, spawned_at: datetime) -> dict[str, float]:
    """Seconds from the spawn to each milestone found: the first timestamped line that marks it."""
    found: dict[str, float] = {}
    for line in log_text.splitlines():
        at = None
        for ms in MILESTONES:
            if ms.phase in found or not ms.pattern.search(line):
                continue
            at = _stamp_s(line, spawned_at) if at is None else at
            if at is not None:
                found[ms.phase] = at
        if len(found) == len(MILESTONES):  # the rest of the log is the server at work
            break
    return found


def vllm_reported(log_text: str) -> dict[str, float]:
    out = {}
    for key, pattern in _REPORTED.items():
        m = pattern.search(log_text)
        if m:
            out[key] = float(next(g for g in m.groups() if g is not None))
    return out


def start_anatomy(
    log_text: str, spawned_at: datetime, healthy_s: float, first_token_s: float | None = None
) -> StartAnatomy:
    """The phases of one start. `spawned_at`: the local wall time of the spawn (vLLM stamps its
    lines in local time); `healthy_s`, `first_token_s`: seconds from the spawn to /health's 200
    and to the first token served, by the tuner's clock (None: nothing was served yet)."""
    found = milestones(log_text, spawned_at)
    found[HEALTH] = healthy_s
    if first_token_s is not None:
        found[FIRST_TOKEN] = max(first_token_s, healthy_s)
    phases: dict[str, float | None] = {}
    before = 0.0
    for name in PHASES:
        if name not in found:
            phases[name] = None
            continue
        at = min(max(found[name], before), healthy_s) if name not in (HEALTH, FIRST_TOKEN) else found[name]
        phases[name] = at - before
        before = at
    return StartAnatomy(phases, vllm_reported(log_text))


def describe_start_anatomy(anatomy: dict[str, Any] | None) -> str:
    """One line for a stored anatomy: 'import 8.2 + engine process 8.3 + ... (missing: warm-up)'."""
    if not anatomy:
        return ""
    phases = anatomy.get("phases", {})
    text = " + ".join(f"{name} {s:.1f}" for name, s in phases.items() if s is not None)
    missing = [name for name, s in phases.items() if s is None]
    return text + (f" (missing: {', '.join(missing)})" if missing else "")
