"""`autotune scenario from-trace` for a trace of conversations: a `sessions:` workload fitted to
the sessions the trace holds (`loadgen.read_sessions`: our JSONL's `session_id`/`turn`, or a
ShareGPT file), and what they look like.

The fit: turns per session, each turn's new user tokens and its output tokens as a lognormal
of the trace's mean and standard deviation clipped to the trace's own min and max (fixed where
every value is the same), so no session, message or answer is longer or shorter than one the
trace has; the system prompt the sessions' median; think time exponential with the median gap
between a session's turns as its mean (0 where the file has no times); sessions arrive as a
Poisson process at the shipped scenario's `capacity_fraction` of the measured capacity, in turns
per second. A session's last turn must fit the context with the longest message and answer at
every turn (`SessionSpec.longest_request_tokens`); where it would not, the turns are capped and
the findings say so and which `--context` keeps them all.

Everything else comes from the shipped sessions scenario closest to the trace (|log ratio| of the
mean turns, new user tokens and output tokens): its SLOs and objectives as they are (they name
turn classes, and the fitted workload keeps that scenario's `turn_classes`), search space,
baselines, server settings, capacity search and budget.

`scenario_from_trace` is what the command calls: sessions where the trace has multi-turn ones,
else `trace_scenario.build`'s replay, as for any trace of independent requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadgen import SessionSpec, TraceError, TraceSessions, read_sessions
from search import scenario as scenario_mod
from search.trace_scenario import (
    _COPIED,
    _WORKLOAD_COPIED,
    DEFAULT_CAPACITY_FRACTION,
    DEFAULT_CONTEXT,
    OBJECTIVES,
    Findings,
    _duration,
    _objectives,
    build,
    scenario_name,
    scenario_text,
    shipped_scenarios,
)

_GRID = (np.arange(2000) + 0.5) / 2000  # quantile points: a distribution's mean


@dataclass(frozen=True)
class SessionFindings:
    """What a trace's sessions hold, the workload fitted to them, and where the rest comes from."""

    sessions: TraceSessions
    fitted: dict[str, Any]  # the workload's `sessions:` section
    context: int
    turns_cap: int | None  # turns were capped to this to fit the context; None: they fit
    context_needed: int  # the context every observed turn count fits
    closest: str
    distances: dict[str, float]


def multi_turn_sessions(path: Path) -> TraceSessions | None:
    """The trace's sessions if any has a second turn; None for a trace of independent requests
    (one-turn sessions included: they are replayed as before)."""
    try:
        sessions = read_sessions(path)
    except TraceError as e:
        raise scenario_mod.ScenarioError(str(e)) from None
    if sessions is None or sessions.multi_turn:
        return sessions
    if sessions.format == "sharegpt":  # nothing to replay instead: its text has neither times nor counts
        raise scenario_mod.ScenarioError(
            f"{path}: no conversation has a second exchange: nothing of sessions to fit (a ShareGPT "
            "file of single exchanges is a request class's `sharegpt:` prompts, not a trace)"
        )
    return None


def scenario_from_trace(
    path: Path, out: Path, objective: str | None = None, context: int | None = None
) -> tuple[str, Findings | SessionFindings]:
    """What `from-trace` writes: a sessions workload for a trace of multi-turn sessions, else a
    replay of its requests (`trace_scenario.build`)."""
    if objective is not None and objective not in OBJECTIVES:
        raise scenario_mod.ScenarioError(f"--objective: {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    sessions = multi_turn_sessions(path)
    if sessions is None:
        return build(path, out, objective, context)
    return build_sessions(sessions, path, out, objective, context)


def fit_lengths(values: np.ndarray) -> dict[str, Any]:
    """A LengthDist section: lognormal of the values' mean and sd within their min and max."""
    v = np.asarray(values, dtype=float)
    lo, hi = int(v.min()), int(v.max())
    if lo == hi:
        return {"dist": "fixed", "value": lo}
    return {
        "dist": "lognormal",
        "mean": round(float(v.mean()), 1),
        "std": round(float(v.std()), 1),
        "min": lo,
        "max": hi,
    }


def _capped(turns: dict[str, Any], cap: int) -> dict[str, Any]:
    if turns["dist"] == "fixed":
        return {"dist": "fixed", "value": cap}
    return {**turns, "min": min(turns["min"], cap), "max": cap}


def fit_sessions(
    s: TraceSessions, turn_classes: dict[str, int], context: int
) -> tuple[dict[str, Any], int | None, int]:
    """(the `sessions:` section, the turns cap that fits it to `context` or None, the context
    needed without a cap)."""
    section: dict[str, Any] = {
        "turns": fit_lengths(s.turns),
        "user_tokens": fit_lengths(s.user_tokens),
        "output_tokens": fit_lengths(s.output_tokens),
        "system_prompt_tokens": int(np.median(s.system_tokens)),
        "think_time_s": {
            "mean_s": round(float(np.median(s.think_s)), 2) if len(s.think_s) else 0.0,
            "dist": "exponential",
        },
        "turn_classes": dict(turn_classes),
    }
    needed = SessionSpec.model_validate(section).longest_request_tokens()
    if needed <= context:
        return section, None, needed
    top = int(s.turns.max())
    for cap in range(top - 1, 1, -1):
        candidate = {**section, "turns": _capped(section["turns"], cap)}
        if SessionSpec.model_validate(candidate).longest_request_tokens() <= context:
            return candidate, cap, needed
    raise scenario_mod.ScenarioError(
        f"{s.source}: two turns of the trace's longest message and answer ({int(s.user_tokens.max())} + "
        f"{int(s.output_tokens.max())} tokens) do not fit the context ({context} tokens): give --context {needed}"
    )


def _features(s: TraceSessions) -> tuple[float, float, float]:
    return float(s.turns.mean()), float(s.user_tokens.mean()), float(s.output_tokens.mean())


def _scenario_features(sc: scenario_mod.Scenario) -> tuple[float, float, float] | None:
    spec = sc.workload.sessions
    if spec is None:
        return None
    return (
        spec.mean_turns(),
        float(spec.user_tokens.quantile(_GRID).mean()),
        float(spec.output_tokens.quantile(_GRID).mean()),
    )


def closest_sessions(s: TraceSessions, shipped: dict[str, scenario_mod.Scenario]) -> tuple[str, dict[str, float]]:
    mine = _features(s)
    dist = {}
    for name, sc in shipped.items():
        feats = _scenario_features(sc)
        if feats is not None:
            dist[name] = sum(abs(math.log(a / b)) for a, b in zip(mine, feats))
    if not dist:
        raise scenario_mod.ScenarioError("no shipped sessions scenario to start from")
    return min(dist, key=dist.__getitem__), dict(sorted(dist.items(), key=lambda kv: kv[1]))


def build_sessions(
    s: TraceSessions, path: Path, out: Path, objective: str | None = None, context: int | None = None
) -> tuple[str, SessionFindings]:
    """(the scenario's YAML text, the findings), validated as `make search` will read it."""
    name, dist = closest_sessions(s, shipped_scenarios())
    source = scenario_mod.read_mapping((scenario_mod.CONFIG_DIR / f"{name}.yaml").read_text(), name)
    src_wl = source.get("workload") or {}
    fixed = (source.get("server") or {}).get("fixed") or {}
    context = context or int(fixed.get("max_model_len") or DEFAULT_CONTEXT)
    turn_classes = (src_wl.get("sessions") or {}).get("turn_classes") or {"first": 1, "later": 2}
    fitted, cap, needed = fit_sessions(s, turn_classes, context)
    found = SessionFindings(s, fitted, context, cap, needed, name, dist)
    workload: dict[str, Any] = {"endpoint": "chat"}
    workload.update({k: src_wl[k] for k in _WORKLOAD_COPIED if k in src_wl})
    workload.setdefault("duration_s", 45)
    capacity_fraction = (src_wl.get("arrival") or {}).get("capacity_fraction", DEFAULT_CAPACITY_FRACTION)
    workload["arrival"] = {"mode": "poisson", "capacity_fraction": capacity_fraction}
    workload["sessions"] = fitted
    objectives, selection = _objectives(source, objective, keep_class=True)
    data: dict[str, Any] = {
        "name": scenario_name(path),
        "title": f"Sessions of {path.name}",
        "source": f"autotune scenario from-trace {path.name}; settings of the shipped scenario {name}",
        "description": summary_line(found),
        "workload": workload,
        "objectives": objectives,
        "slos": source.get("slos") or [],
        "selection": selection,
    }
    data.update({k: source[k] for k in _COPIED if k in source})
    return scenario_text(data, context, findings_lines(found), out), found


def summary_line(f: SessionFindings) -> str:
    s = f.sessions
    return (
        f"{s.sessions} sessions ({int(s.turns.sum())} turns) of {Path(s.source).name}, fitted as a sessions "
        f"workload on the chat endpoint: turns per session median {np.median(s.turns):g}, new user tokens "
        f"median {np.median(s.user_tokens):.0f}, outputs median {np.median(s.output_tokens):.0f}; sessions "
        "arrive as a Poisson process at a fraction of the measured capacity."
    )


def _dist_text(d: dict[str, Any]) -> str:
    if d["dist"] == "fixed":
        return f"{d['value']}"
    return f"lognormal mean {d['mean']:g} sd {d['std']:g} in {d['min']}-{d['max']}"


def findings_lines(f: SessionFindings) -> list[str]:
    """What `from-trace` prints of a trace's sessions, and heads the scenario file with."""
    s = f.sessions

    def q(d: dict[str, float]) -> str:
        return ", ".join(f"{k} {v:,.0f}" for k, v in d.items())

    span = f" over {_duration(s.span_s)}" if s.span_s > 0 else ""
    if len(s.think_s):
        think = (
            f"think times: median {np.median(s.think_s):.1f} s between a session's turns, p90 "
            f"{np.quantile(s.think_s, 0.9):.1f} s (upper bounds: a gap holds the previous answer's latency)"
        )
    else:
        think = "think times: none in the file (think_time_s 0: each turn follows the answer at once)"
    system = int(f.fitted["system_prompt_tokens"])
    fitted, think_fit = f.fitted, f.fitted["think_time_s"]
    lines = [
        f"{Path(s.source).name}: {s.sessions:,} sessions, {int(s.turns.sum()):,} turns{span} ({s.format} format, sessions)",
        f"turns per session: median {np.median(s.turns):g}, {int(s.turns.min())}-{int(s.turns.max())}",
        f"new user tokens per turn: {q(s.user_quantiles())}",
        f"output tokens per turn: {q(s.output_quantiles())}",
        think,
        f"prompt tokens repeated from earlier turns: {s.repeated_share:.0%} (what a prefix cache can reuse within a session)",
        f"system prompt: {system} tokens (the sessions' median)" if system else "system prompt: none recorded",
        f"fitted: turns {_dist_text(fitted['turns'])}; think time {think_fit['dist']}, mean {think_fit['mean_s']:g} s",
        f"fitted: user tokens {_dist_text(fitted['user_tokens'])}; output tokens {_dist_text(fitted['output_tokens'])}",
    ]
    if f.turns_cap is not None:
        lines.append(
            f"turns capped at {f.turns_cap} (the trace has up to {int(s.turns.max())}) so that a session's last turn "
            f"fits the context ({f.context} tokens); --context {f.context_needed} keeps them all"
        )
    lines.append(
        "closest shipped sessions scenario: "
        + ", ".join(f"{name} {d:.2f}" for name, d in f.distances.items())
        + f" (distance; settings from {f.closest})"
    )
    return [*lines, *(f"note: {n}" for n in s.notes)]
