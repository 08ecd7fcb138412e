"""Requests from a trace file: read (`formats`), replayed (`replay`: the seeded window, the
trace's gaps scaled to the run's rate, lengths clipped to the context), turned into prompts that
really share their prefixes (`prompts`), described (`stats`), and named in a workload (`spec`);
the conversations a trace's session columns or ShareGPT file hold (`sessions`).

The rest of the load generator imports from here, never from the modules inside.
"""

from loadgen.trace.formats import DEFAULT_CLASS, FORMATS, OPTIONAL, REQUIRED, Trace, TraceError, read_trace
from loadgen.trace.replay_plan import clip_lengths, clipped, replay_offsets, warmup_rows, window_rows, window_start
from loadgen.trace.stats import (
    TrafficStats,
    interarrival_cv,
    mean_rate,
    rate_over_time,
    shared_tokens_from_ids,
    shared_tokens_from_segments,
    traffic_stats,
)
from loadgen.trace.trace_prompts import CHAT_RESERVE_TOKENS, TraceDraft, trace_drafts
from loadgen.trace.trace_sessions import TraceSessions, read_sessions
from loadgen.trace.trace_spec import TraceSpec

__all__ = [
    "CHAT_RESERVE_TOKENS",
    "DEFAULT_CLASS",
    "FORMATS",
    "OPTIONAL",
    "REQUIRED",
    "Trace",
    "TraceDraft",
    "TraceError",
    "TraceSessions",
    "TraceSpec",
    "TrafficStats",
    "clip_lengths",
    "clipped",
    "interarrival_cv",
    "mean_rate",
    "rate_over_time",
    "read_sessions",
    "read_trace",
    "replay_offsets",
    "shared_tokens_from_ids",
    "shared_tokens_from_segments",
    "trace_drafts",
    "traffic_stats",
    "warmup_rows",
    "window_rows",
    "window_start",
]
