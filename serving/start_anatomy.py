"""Where a server start's seconds went, read from vLLM's own log lines and their timestamps.

A start passes milestones that vLLM logs, each from the process that reaches it:

    import           spawn -> the API server's first log line (Python, torch and vLLM imported)
    model config     -> "Resolved architecture" (vLLM inspects the model's class in a subprocess
                        that imports vLLM again, unless its cache under VLLM_CACHE_ROOT knows it)
    engine process   -> the EngineCore process's first line (spawned and imported, or forked)
    worker process   -> "Starting to load model" / "Loading model from scratch" (the worker
                        spawned and imported: CPU, or several GPUs; a single GPU loads in the
                        EngineCore process, and this is its device and NCCL set-up)
    model load       -> "Loading weights took" (0.32) / "Model loading took" (0.26 GPU)
    compile          -> "torch.compile took N s in total" (GPU; cached or not: `cached_compile`)
    KV cache         -> "KV cache size: N tokens" (the memory profiling run)
    kernel warm-ups  -> the last stamped line before CUDA graph capture begins (FlashInfer's
                        autotune, MoE router GEMMs, DeepGEMM, CuTeDSL: whatever the version warms)
    CUDA graphs      -> "Graph capturing finished"
    warm-up          -> "init engine (profile, create kv cache, warmup model) took" (on a GPU,
                        after capture: the sampler's JIT run, inductor's lazy init, the JIT monitor)
    API server       -> "Starting vLLM server on" (0.32) / "Starting vLLM API server 0 on" (0.26)
    health           -> /health answered 200 (the tuner's clock)
    first token      -> the first token of the first request the tuner sent (the tuner's clock)
    load warm-up     -> the first measured request sent: the tuner's own warm-up requests
                        (the tuner's clock)

Each phase runs from the previous milestone found to its own. A milestone whose line is missing
(another version's wording, an eager server that compiles and captures nothing, a log cut short)
is reported as None, and its seconds fall to the next phase found, so the phases found always
add up to the start. vLLM stamps lines to the second (`%m-%d %H:%M:%S`, local time), so a phase
from the log is known to about a second; a line is placed at the middle of its second, and never
before the milestone before it or after the server answered. vLLM's own finer figures (weights,
torch.compile and whether it came from the cache, graph capture, engine init) are kept beside
the phases as it reported them.
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
    Milestone("model config", re.compile(r"Resolved architecture: ")),
    Milestone("engine process", re.compile(r"^\(EngineCore[\w-]* pid=|Initializing a V1 LLM engine")),
    Milestone("worker process", re.compile(r"Starting to load model|Loading model from scratch")),
    Milestone("model load", re.compile(r"Loading weights took|Model loading took")),
    Milestone("compile", re.compile(r"torch\.compile (?:takes|took) [\d.]+ s in total")),
    Milestone("KV cache", re.compile(r"KV cache size: [\d,]+ tokens|# (?:GPU|cuda) blocks: \d+")),
    # no line of its own: the last stamped line before capture begins (see `milestones`)
    Milestone("kernel warm-ups", re.compile(r"(?!)")),
    Milestone("CUDA graphs", re.compile(r"Graph capturing finished in")),
    Milestone("warm-up", re.compile(r"init engine \(profile, create kv cache, warmup model\) took")),
    Milestone("API server", re.compile(r"Starting vLLM (?:API )?server (?:\d+ )?on ")),
)
KERNEL_WARM_UPS = "kernel warm-ups"
# The first line of CUDA graph capture (0.26 prints its progress bar unstamped).
_CAPTURE_BEGINS = re.compile(r"Capturing CUDA graphs|Capturing cudagraphs")
HEALTH, FIRST_TOKEN, LOAD_WARM_UP = "health", "first token", "load warm-up"
PHASES = (*tuple(m.phase for m in MILESTONES), HEALTH, FIRST_TOKEN, LOAD_WARM_UP)
_TUNER_CLOCK = (HEALTH, FIRST_TOKEN, LOAD_WARM_UP)

# vLLM's own durations, in seconds, where it logs them.
_REPORTED = {
    "weights_s": re.compile(
        r"Loading weights took ([\d.]+) s|Model loading took [\d.]+ GiB(?: memory)? and ([\d.]+) s"
    ),
    "torch_compile_s": re.compile(r"torch\.compile (?:takes|took) ([\d.]+) s in total|\(compilation: ([\d.]+) s"),
    "dynamo_s": re.compile(r"Dynamo bytecode transform time: ([\d.]+) s"),
    # one of these two: the compiled graph loaded from the cache, or compiled afresh
    "compile_from_cache_s": re.compile(r"Directly load the compiled graph\(s\) for .* took ([\d.]+) s"),
    "inductor_compile_s": re.compile(r"Compiling a graph for .* takes ([\d.]+) s"),
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

    @property
    def cached_compile(self) -> bool | None:
        """Whether torch.compile's graphs came from the cache (None: the log says neither)."""
        if "compile_from_cache_s" in self.reported:
            return True
        return False if "inductor_compile_s" in self.reported else None

    def with_first_token(
        self, after_health_s: float | None, measured_after_health_s: float | None = None
    ) -> StartAnatomy:
        """With the first token served `after_health_s` after /health answered (None: none was),
        and the first measured request sent `measured_after_health_s` after it: the load's
        warm-up in between."""
        if after_health_s is None:
            return self
        first = max(after_health_s, 0.0)
        phases = {**self.phases, FIRST_TOKEN: first}
        if measured_after_health_s is not None:
            phases[LOAD_WARM_UP] = max(measured_after_health_s - first, 0.0)
        return replace(self, phases=phases)

    def as_dict(self) -> dict[str, Any]:
        """What a trial stores under `timings["start_anatomy"]`."""
        return {
            "phases": {k: None if v is None else round(v, 2) for k, v in self.phases.items()},
            "vllm_reported": self.reported,
        }

    @classmethod
    def from_dict(cls, stored: dict[str, Any]) -> StartAnatomy:
        """The anatomy `as_dict` stored."""
        return cls(phases=dict(stored["phases"]), reported=dict(stored.get("vllm_reported") or {}))


def _stamp_s(line: str, spawned_at: datetime) -> float | None:
    """Seconds from the spawn to the middle of the second the line was stamped in."""
    m = _STAMP.match(line)
    if m is None:
        return None
    year = spawned_at.year + (1 if int(m["month"]) < spawned_at.month else 0)  # a start across New Year
    at = datetime(year, int(m["month"]), int(m["day"]), int(m["h"]), int(m["m"]), int(m["s"]))
    return (at - spawned_at.replace(tzinfo=None)).total_seconds() + 0.5


def milestones(log_text: str, spawned_at: datetime) -> dict[str, float]:
    """Seconds from the spawn to each milestone found: the first timestamped line that marks it
    (kernel warm-ups: the last stamped line after the KV cache's before capture begins)."""
    found: dict[str, float] = {}
    last_stamp: float | None = None
    for line in log_text.splitlines():
        stamp = _stamp_s(line, spawned_at)
        if (
            KERNEL_WARM_UPS not in found
            and "KV cache" in found
            and _CAPTURE_BEGINS.search(line)
            and last_stamp is not None
            and last_stamp >= found["KV cache"]
        ):
            found[KERNEL_WARM_UPS] = last_stamp
        for ms in MILESTONES:
            if ms.phase not in found and stamp is not None and ms.pattern.search(line):
                found[ms.phase] = stamp
        last_stamp = stamp if stamp is not None else last_stamp
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
        at = min(max(found[name], before), healthy_s) if name not in _TUNER_CLOCK else found[name]
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
