"""Thresholds of the decision tree and the anti-pattern checks, each with where it comes from."""

from __future__ import annotations

from loadgen import DEFAULT_LAG_LIMIT_MS

# --- thresholds ----------------------------------------------------------------------------
# Failed requests: the scenarios' own `error_rate <= 0.01` SLO (configs/*.yaml); seed 000's tree
# branch "错误率突增" (error rate jumps).
ERROR_RATE_MAX = 0.01
# Client lag: the load generator flags any p99 schedule lag above 5 ms (objectives/metrics.py).
# On a shared 2-core host that trips whenever vLLM takes the CPU: 36 ms p99 in the recorded
# queue-bound run (TTFT median 10.6 s), 9 ms in the unstarved control (TTFT median 33 ms). The
# client is the bottleneck only when the p99 request went out later than a typical request
# takes to get its first token: the starved recording has 164 ms against 53 ms (3.1x), the
# control 0.29x (tests/fixtures/runs/).
CLIENT_LAG_FLOOR_MS = DEFAULT_LAG_LIMIT_MS
CLIENT_LAG_SHARE_OF_TTFT = 1.0
# Preemption: V1 preempts only when a running request cannot get another KV block, so every
# preemption means the cache was full; each one recomputes that request's whole prefill. One
# preempted request in twenty is where that recompute becomes a visible share of the work.
PREEMPTIONS_PER_REQUEST = 0.05
# "KV cache near 100%" (seed 001, monitoring section). Gauges are sampled once a second, so
# short peaks are missed: 0.9 of the cache sampled counts as full.
KV_FULL = 0.9
# Queueing (seed 000: "排队时间长? waiting 队列积压?"): requests wait at least as long in the
# queue as half their time to first token on the server, with somebody actually waiting.
QUEUE_SHARE_OF_TTFT = 0.5
QUEUE_TIME_FLOOR_MS = 10.0  # below one scheduler step nothing is "long"
# "TTFT 很高 (>1s)" (seed 000 tree, first branch), used when no TTFT SLO or calibration says more.
TTFT_HIGH_MS = 1000.0
# Relative to the idle server: the TPOT SLO of configs/mixed.yaml (x_unloaded: 4).
LATENCY_X_UNLOADED = 4.0
# A p99 inter-token gap this many times its median: decode steps stalled behind prefill chunks.
ITL_STALL_RATIO = 5.0
# Headroom (seed 000 tree "running 序列数很少"): the batch never got half full.
BATCH_HALF = 0.5

# --- anti-pattern thresholds ---------------------------------------------------------------
# Seed 000's table: max-model-len 32768 for chat where 4096 does (8x). 4x the longest request
# leaves room for the workload to grow and still catches the seed's example.
MAX_MODEL_LEN_SLACK = 4.0
# Seed 000: "max-num-seqs = 1024" is the anti-pattern, "通常 64-256"; seed 002: set it to
# 1.5-2x the real concurrency. Flag from twice the top of the seed's range.
MAX_NUM_SEQS_HIGH = 512
CONCURRENCY_HEADROOM = 2.0
# Seed 002: --gpu-memory-utilization best 80-95%, 0.95 the aggressive end; seed 001: keep
# 10-15% free for spikes.
GPU_MEMORY_UTILIZATION_HIGH = 0.95
GPU_MEMORY_UTILIZATION_HEADROOM = 0.90
GPU_MEMORY_UTILIZATION_LOW = 0.80
# Seed 000 (swap-space row): "至少设 4GB".
SWAP_SPACE_MIN_GIB = 4.0
# Seed 000's recommended delay factors: 0.05-0.15 for interactive and mixed loads.
DELAY_FACTOR_RANGE = (0.05, 0.15)
# With chunked prefill, a prompt needing more steps than this to prefill makes its TTFT a
# multiple of a step (seed 002: larger max-num-batched-tokens, higher throughput, higher TTFT).
PREFILL_STEPS_MAX = 8
