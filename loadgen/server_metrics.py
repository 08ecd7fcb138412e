"""The server's own view of a run, from its Prometheus `/metrics`.

Counters and histograms are read before and after the run and differenced (preemptions, prefix
cache hits, tokens, queue time). Gauges (running, waiting, KV cache usage) only exist as a
point in time, so a background sampler reads them about once a second for peaks and means.
The text is fetched by `vllm_http` (the one home of the tuner's HTTP to a server); this module
reads it.

The sampler must not disturb the measurement: it fetches the text on the client's event loop
(a few ms of server work per second) and picks the three gauge lines out with string tests
(~0.1 ms); the full Prometheus parse (~15 ms for vLLM's ~75 KB) runs only outside the run.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from vllm_http import fetch_metrics_text

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"
PREEMPTIONS = "vllm:num_preemptions_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
REQUEST_SUCCESS = "vllm:request_success_total"
QUEUE_TIME = "vllm:request_queue_time_seconds"
SERVER_TTFT = "vllm:time_to_first_token_seconds"

NAN = float("nan")


@dataclass
class MetricsSnapshot:
    """`vllm:` samples of one scrape: sample name -> [(labels, value)]."""

    samples: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)
    taken_at: float = 0.0

    @classmethod
    def parse(cls, text: str, taken_at: float | None = None) -> MetricsSnapshot:
        from prometheus_client.parser import text_string_to_metric_families

        samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            if not family.name.startswith("vllm:"):
                continue
            for s in family.samples:
                samples.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
        return cls(samples, time.perf_counter() if taken_at is None else taken_at)

    def total(self, name: str) -> float | None:
        """Sum over every label set (engines, finish reasons); None if the server has no such metric."""
        rows = self.samples.get(name)
        if rows is None:
            return None
        return float(sum(v for _, v in rows))

    def histogram(self, name: str) -> tuple[np.ndarray, np.ndarray, float, float] | None:
        """(upper bounds, cumulative counts, sum, count), summed over label sets."""
        rows = self.samples.get(name + "_bucket")
        if rows is None:
            return None
        by_le: dict[float, float] = {}
        for labels, value in rows:
            le = float(labels["le"])
            by_le[le] = by_le.get(le, 0.0) + value
        les = np.array(sorted(by_le))
        counts = np.array([by_le[le] for le in les])
        return les, counts, self.total(name + "_sum") or 0.0, self.total(name + "_count") or 0.0


def histogram_quantile(q: float, les: np.ndarray, cumulative: np.ndarray) -> float:
    """Prometheus' histogram_quantile: linear within the bucket holding the rank."""
    total = cumulative[-1] if len(cumulative) else 0.0
    if total <= 0:
        return NAN
    rank = q * total
    i = int(np.searchsorted(cumulative, rank, side="left"))
    if i >= len(les):
        i = len(les) - 1
    if math.isinf(les[i]):  # rank in the +Inf bucket: the largest finite bound, as Prometheus
        finite = les[np.isfinite(les)]
        return float(finite[-1]) if len(finite) else NAN
    lower = les[i - 1] if i > 0 else 0.0
    below = cumulative[i - 1] if i > 0 else 0.0
    in_bucket = cumulative[i] - below
    if in_bucket <= 0:
        return float(les[i])
    return float(lower + (les[i] - lower) * (rank - below) / in_bucket)


@dataclass(frozen=True)
class GaugeSample:
    t: float
    running: float
    waiting: float
    kv_usage: float


def _value(line: str) -> float:
    return float(line.rsplit(" ", 1)[1])


def scan_gauges(text: str, t: float | None = None) -> GaugeSample:
    """The three gauges from raw /metrics text, without a full parse. Engines are summed (KV: max)."""
    running = waiting = 0.0
    kv = NAN
    seen = False
    for line in text.split("\n"):
        if not line.startswith("vllm:"):
            continue
        if line.startswith(RUNNING + "{") or line.startswith(RUNNING + " "):
            running += _value(line)
            seen = True
        elif line.startswith(WAITING + "{") or line.startswith(WAITING + " "):
            waiting += _value(line)
        elif line.startswith(KV_USAGE + "{") or line.startswith(KV_USAGE + " "):
            v = _value(line)
            kv = v if kv != kv else max(kv, v)
    if not seen:
        running = waiting = NAN
    return GaugeSample(time.perf_counter() if t is None else t, running, waiting, kv)


class GaugeSampler:
    """Reads the gauges every `period_s` while a run is in progress."""

    def __init__(self, session, base_url: str, period_s: float = 1.0):
        self.session = session
        self.base_url = base_url
        self.period_s = period_s
        self.samples: list[GaugeSample] = []
        self.failures = 0
        self._task: asyncio.Task | None = None

    async def _loop(self) -> None:
        next_at = time.perf_counter()
        while True:
            text = await fetch_metrics_text(self.session, self.base_url, timeout_s=self.period_s * 5)
            if text is None:
                self.failures += 1
            else:
                self.samples.append(scan_gauges(text))
            next_at += self.period_s
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> list[GaugeSample]:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        return self.samples


@dataclass
class ServerDiagnostics:
    """Deltas over the run (counters, histograms) and peaks/means of the sampled gauges. NaN: unknown."""

    preemptions: float = NAN
    prefix_cache_queries: float = NAN
    prefix_cache_hits: float = NAN
    prefix_cache_hit_rate: float = NAN  # hits / queries, in tokens
    kv_cache_usage_peak: float = NAN  # fraction 0-1
    kv_cache_usage_mean: float = NAN
    waiting_peak: float = NAN
    waiting_mean: float = NAN
    running_peak: float = NAN
    running_mean: float = NAN
    queue_time_mean_ms: float = NAN  # arrival at the engine -> first scheduled
    queue_time_p95_ms: float = NAN  # from histogram bucket deltas (bucket-resolution)
    ttft_mean_ms: float = NAN  # the server's own TTFT (excludes HTTP and detokenizing)
    prompt_tokens: float = NAN
    generation_tokens: float = NAN
    requests_succeeded: float = NAN
    samples: int = 0  # gauge samples taken during the run

    def flat(self) -> dict[str, float]:
        return {f"server_{k}": float(v) for k, v in asdict(self).items()}


SERVER_KEYS: tuple[str, ...] = tuple(f"server_{f.name}" for f in fields(ServerDiagnostics))


def _delta(before: MetricsSnapshot | None, after: MetricsSnapshot | None, name: str) -> float:
    if before is None or after is None:
        return NAN
    a, b = after.total(name), before.total(name)
    if a is None or b is None:
        return NAN
    return max(0.0, a - b)  # a restarted server resets counters; never report negative work


def _histogram_delta(before, after, name):
    if before is None or after is None:
        return None
    hb, ha = before.histogram(name), after.histogram(name)
    if hb is None or ha is None or not np.array_equal(hb[0], ha[0]):
        return None
    return ha[0], np.maximum(ha[1] - hb[1], 0), ha[2] - hb[2], ha[3] - hb[3]


def diagnose(
    before: MetricsSnapshot | None, after: MetricsSnapshot | None, samples: Sequence[GaugeSample] = ()
) -> ServerDiagnostics:
    d = ServerDiagnostics()
    d.preemptions = _delta(before, after, PREEMPTIONS)
    d.prefix_cache_queries = _delta(before, after, PREFIX_QUERIES)
    d.prefix_cache_hits = _delta(before, after, PREFIX_HITS)
    if d.prefix_cache_queries > 0:
        d.prefix_cache_hit_rate = d.prefix_cache_hits / d.prefix_cache_queries
    d.prompt_tokens = _delta(before, after, PROMPT_TOKENS)
    d.generation_tokens = _delta(before, after, GENERATION_TOKENS)
    d.requests_succeeded = _delta(before, after, REQUEST_SUCCESS)
    queue = _histogram_delta(before, after, QUEUE_TIME)
    if queue is not None and queue[3] > 0:
        les, counts, total, count = queue
        d.queue_time_mean_ms = 1000 * total / count
        d.queue_time_p95_ms = 1000 * histogram_quantile(0.95, les, counts)
    ttft = _histogram_delta(before, after, SERVER_TTFT)
    if ttft is not None and ttft[3] > 0:
        d.ttft_mean_ms = 1000 * ttft[2] / ttft[3]
    # Peaks include the scrapes around the run, so a short run still has two points.
    points = list(samples)
    for snap in (before, after):
        running = snap.total(RUNNING) if snap is not None else None
        if snap is not None and running is not None:
            kv = snap.samples.get(KV_USAGE)
            kv_usage = max(v for _, v in kv) if kv else NAN
            points.append(GaugeSample(snap.taken_at, running, snap.total(WAITING) or 0.0, kv_usage))
    d.samples = len(samples)
    for attr, key in (("running", "running"), ("waiting", "waiting"), ("kv_cache_usage", "kv_usage")):
        values = np.array([getattr(p, key) for p in points], dtype=float)
        values = values[~np.isnan(values)]
        if len(values):
            setattr(d, f"{attr}_peak", float(values.max()))
            inner = np.array([getattr(p, key) for p in samples], dtype=float)
            inner = inner[~np.isnan(inner)]
            setattr(d, f"{attr}_mean", float(inner.mean()) if len(inner) else float(values.mean()))
    return d
