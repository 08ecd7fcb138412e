"""The load generator and what it measures, usable on its own (`autotune load`, benchmarks).

A workload (`workload`, its classes in `request_class` with their length distributions
(`length_dist`) and the representative order its requests take them in (`class_order`); its
arrivals and their schedule in `arrivals`) becomes
requests (`prompts`, `tokenizer`; a ShareGPT file's prompts in `sharegpt`) sent at the times its
arrivals give; the client (`client`, or the SDK's in `openai_client`, both reading a stream by
`stream_record`'s rules) sends them on their schedule (`dispatch`) and records each (`request_record.RequestRecord`);
`loadrun.run_load` is one measured run (made as its `LoadOptions` say, `load_options`,
returning its `LoadResult`, `load_result`; what it prepares in `preparation`; its phases sent
in `run_phases`), watched for a hung server (`stall`: the stall watch; `liveness`: the engine's
gauges read to show it alive before a verdict and drained between load stages, `wait_idle`) and, where the caller gives one, by an abort check (`AbortCheck`, asked
while an open loop runs); `metrics` computes the flat metrics from those records as `vllm bench
serve` defines them (keyed by `MetricName`, `metric_name`) and `server_metrics` the server's own /metrics
deltas; `event_loop.run_async` runs a load run, or any other coroutine of the tuner, on a fresh
event loop that takes interrupts between its callbacks, and keeps a load's client off the CPUs
vLLM's engine threads are pinned to. Nothing here imports its parent package: the stages, the
capacity search, scoring and the abort rules build on this, not the reverse. The requests to the
server besides the load (its health, models, /metrics, /tokenize) are `vllm_http`'s, the package
below this one.
Requests may also be the turns of multi-turn sessions (`sessions`: the scripts and each turn's
prompt; `session_dispatch`: turns sent as answers come back; `turn_metrics`: per-turn figures and
the prefix reuse the sessions imply).
Requests may also come from a trace file (`trace`: readers, the replay's window and time
scaling, its prompts and statistics, and the sessions a trace holds).
Other packages import from here, never from the modules inside.
"""

from loadgen.arrivals import ArrivalSpec, open_loop_offsets
from loadgen.class_order import mix_deviation
from loadgen.event_loop import AVOID_ENGINE_CPUS_ENV, engine_pinned_cpus, run_async
from loadgen.liveness import ServerHung, engine_answers, liveness_before_verdict, wait_idle
from loadgen.load_options import Abort, AbortCheck, LoadOptions
from loadgen.load_result import LoadResult
from loadgen.loadrun import run_load, run_load_sync
from loadgen.metric_name import CLASS_SEPARATOR, LATENCY_FAMILIES, MetricName, class_key
from loadgen.metrics import (
    BASE_KEYS,
    CLIENT_BEHIND,
    DEFAULT_LAG_LIMIT_MS,
    PER_CLASS_KEYS,
    Bound,
    GoodputSLO,
    compute_metrics,
    json_safe,
    timed_tpot_median_ms,
)
from loadgen.preparation import LoadRunError, ServerTokenCounter, cached_requests, prepare_requests
from loadgen.prompts import build_requests
from loadgen.request_record import SAMPLE_KEYS, RequestRecord, records_from_samples, request_samples
from loadgen.server_metrics import SERVER_KEYS, GaugeSample, MetricsSnapshot, scan_gauges
from loadgen.sessions import SessionScript, SessionSpec, ThinkTime, turn_messages
from loadgen.stall import ProgressWatch, Stall, stall_bound_s, traced
from loadgen.tokenizer import PromptTokenizer, TokenizerError
from loadgen.trace import (
    Trace,
    TraceError,
    TraceSessions,
    TraceSpec,
    TrafficStats,
    clipped,
    rate_over_time,
    read_sessions,
    read_trace,
    replay_offsets,
    shared_tokens_from_ids,
    shared_tokens_from_segments,
    traffic_stats,
    warmup_rows,
    window_rows,
    window_start,
)
from loadgen.turn_metrics import SessionReport, TurnStats, cached_prefix_share, turn_stats
from loadgen.workload import WorkloadSpec

__all__ = [
    "AVOID_ENGINE_CPUS_ENV",
    "BASE_KEYS",
    "CLASS_SEPARATOR",
    "CLIENT_BEHIND",
    "DEFAULT_LAG_LIMIT_MS",
    "LATENCY_FAMILIES",
    "PER_CLASS_KEYS",
    "SAMPLE_KEYS",
    "SERVER_KEYS",
    "Abort",
    "AbortCheck",
    "ArrivalSpec",
    "Bound",
    "GaugeSample",
    "GoodputSLO",
    "LoadOptions",
    "LoadResult",
    "LoadRunError",
    "MetricName",
    "MetricsSnapshot",
    "ProgressWatch",
    "PromptTokenizer",
    "RequestRecord",
    "ServerHung",
    "ServerTokenCounter",
    "SessionReport",
    "SessionScript",
    "SessionSpec",
    "Stall",
    "ThinkTime",
    "TokenizerError",
    "Trace",
    "TraceError",
    "TraceSessions",
    "TraceSpec",
    "TrafficStats",
    "TurnStats",
    "WorkloadSpec",
    "build_requests",
    "cached_prefix_share",
    "cached_requests",
    "class_key",
    "clipped",
    "compute_metrics",
    "engine_answers",
    "engine_pinned_cpus",
    "json_safe",
    "liveness_before_verdict",
    "mix_deviation",
    "open_loop_offsets",
    "prepare_requests",
    "rate_over_time",
    "read_sessions",
    "read_trace",
    "records_from_samples",
    "replay_offsets",
    "request_samples",
    "run_async",
    "run_load",
    "run_load_sync",
    "scan_gauges",
    "shared_tokens_from_ids",
    "shared_tokens_from_segments",
    "stall_bound_s",
    "timed_tpot_median_ms",
    "traced",
    "traffic_stats",
    "turn_messages",
    "turn_stats",
    "wait_idle",
    "warmup_rows",
    "window_rows",
    "window_start",
]
