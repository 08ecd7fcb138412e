"""Thresholds of the decision tree and the anti-pattern checks, each with its reason."""

from __future__ import annotations

from loadgen import DEFAULT_LAG_LIMIT_MS

# --- thresholds ----------------------------------------------------------------------------
# Failed requests: the scenarios' own `error_rate <= 0.01` SLO (configs/*.yaml); more than that
# is a jump in the error rate, not the odd timeout.
ERROR_RATE_MAX = 0.01
# Client lag: the load generator flags any p99 schedule lag above 5 ms (loadgen). On a shared
# host that trips whenever vLLM takes the CPU, also in runs whose client is not the problem. The
# client is the bottleneck only when the p99 request went out later than a typical request takes
# to get its first token; the recorded runs of tests/fixtures/runs/ fall on either side of that
# (docs/results.md, "Diagnosis thresholds on recorded runs").
CLIENT_LAG_FLOOR_MS = DEFAULT_LAG_LIMIT_MS
CLIENT_LAG_SHARE_OF_TTFT = 1.0
# Preemption: V1 preempts only when a running request cannot get another KV block, so every
# preemption means the cache was full; each one recomputes that request's whole prefill. One
# preempted request in twenty is where that recompute becomes a visible share of the work.
PREEMPTIONS_PER_REQUEST = 0.05
# A KV cache near 100% is full. Gauges are sampled once a second, so short peaks are missed:
# 0.9 of the cache sampled counts as full.
KV_FULL = 0.9
# Queueing (long queue times, a waiting backlog): requests wait at least as long in the queue
# as half their time to first token on the server, with somebody actually waiting.
QUEUE_SHARE_OF_TTFT = 0.5
QUEUE_TIME_FLOOR_MS = 10.0  # below one scheduler step nothing is "long"
# A TTFT over a second is high for any interactive use; used when no TTFT SLO or calibration says more.
TTFT_HIGH_MS = 1000.0
# Relative to the idle server: TTFT or TPOT this many times the idle server's median counts as high
# even where no SLO on it was missed, so the diagnosis names a bottleneck before a bound is
# crossed. The scenarios' own bounds are looser (configs/mixed.yaml: short TTFT p95 15x, TPOT
# p95 25x), so a trial can be diagnosed prefill- or decode-bound and still meet its SLOs.
LATENCY_X_UNLOADED = 4.0
# A p99 inter-token gap this many times its median: decode steps stalled behind prefill chunks.
ITL_STALL_RATIO = 5.0
# Headroom (few sequences running): the batch never got half full.
BATCH_HALF = 0.5

# --- anti-pattern thresholds ---------------------------------------------------------------
# A common mistake: max-model-len 32768 for chat where 4096 does (8x). 4x the longest request
# leaves room for the workload to grow and still catches that case.
MAX_MODEL_LEN_SLACK = 4.0
# max-num-seqs 1024 without the traffic for it is a common mistake; usual values are 64-256, or
# 1.5-2x the real concurrency. Flag from twice the top of that range.
MAX_NUM_SEQS_HIGH = 512
CONCURRENCY_HEADROOM = 2.0
# --gpu-memory-utilization: 0.80-0.95 is the useful range, 0.95 its aggressive end; 10-15% kept
# free absorbs spikes and other processes.
GPU_MEMORY_UTILIZATION_HIGH = 0.95
GPU_MEMORY_UTILIZATION_HEADROOM = 0.90
GPU_MEMORY_UTILIZATION_LOW = 0.80
# V0 swap space: less than 4 GiB cannot hold the preempted sequences of a busy server.
SWAP_SPACE_MIN_GIB = 4.0
# V0 delay factors that batch arrivals without delaying first tokens much: 0.05-0.15 for
# interactive and mixed loads.
DELAY_FACTOR_RANGE = (0.05, 0.15)
# With chunked prefill, a prompt needing more steps than this to prefill makes its TTFT a
# multiple of a step (a larger max-num-batched-tokens buys throughput with TTFT, and back).
PREFILL_STEPS_MAX = 8
