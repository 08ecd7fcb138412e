"""The run metrics computed from the client's records (`request_record.RequestRecord`) with the
definitions of `vllm bench serve`, and the keys they are flattened under.

The run's metrics read only the records:

* TTFT: first token-bearing chunk - send. E2EL: last token-bearing chunk - send.
* TPOT: (E2EL - TTFT) / (output tokens - 1), per request with > 1 output token.
* ITL: every gap between consecutive token-bearing chunks, pooled over requests (per chunk,
  not per token: equal to TPOT only when each chunk carries one token).
* Output tokens: usage.completion_tokens (the count of token chunks if a server sends none).
* Throughputs divide by the run's duration: from the start of the arrival schedule to the
  last response (the drain tail included, as vLLM); successful requests only.
* Goodput (DistServe / vLLM): successful requests meeting every given per-request SLO, per
  second; a request with <= 1 output token has TPOT 0 for this purpose. Without SLOs every
  successful request counts. `goodput_ratio` divides by all requests sent, failures included.
* Percentiles: numpy linear interpolation. NaN where undefined (no successful request).
* Failed requests (`failed_above`, which the load generator sets): a request that failed or was
  never answered has no latency. It counts in the error rate, and in TTFT, TPOT and E2EL (and as
  many ITL gaps as it asked output tokens for, less one) as a value known only to lie above
  every one measured: a percentile that reaches one of them is unknown (NaN, which violates an
  SLO on it and scores as the objective's penalty), as is a mean over them. So a run that lost
  requests never looks faster than one that served them, and no statistic is a number made up
  for a request that never answered (vLLM leaves them out, as does `failed_above=False`; with
  no failure the numbers are vLLM's). Cut short by an early abort (`aborted`) is not a failure
  and not counted.

The keys follow `metric_name.MetricName`: `BASE_KEYS` for the whole run, `PER_CLASS_KEYS` under
each request class (`ttft_p95_ms@short`), `SERVER_KEYS` for the server's own /metrics."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic

import numpy as np
from pydantic import BaseModel, ConfigDict
from typing_extensions import TypeVar  # PEP 696 defaults (typing has them from 3.13)

from loadgen.metric_name import class_key
from loadgen.request_record import RequestRecord
from loadgen.server_metrics import SERVER_KEYS, ServerDiagnostics

NAN = float("nan")
DEFAULT_LAG_LIMIT_MS = 5.0
# An open loop is "behind" when its p99 send lag exceeds this share of the mean gap between
# arrivals: below it the offered load is the asked one to within a few percent, whatever the
# absolute lag (10 ms at 1.5 req/s is noise; at 2,000 req/s it is 20 requests late).
LAG_SHARE_OF_GAP = 0.1


def lag_limit_ms(mean_rate: float | None) -> float:
    """p99 schedule lag above which a run is flagged `client_behind`."""
    if not mean_rate:
        return DEFAULT_LAG_LIMIT_MS
    return max(DEFAULT_LAG_LIMIT_MS, LAG_SHARE_OF_GAP * 1000.0 / mean_rate)


def json_safe(value: Any) -> Any:
    """NaN and infinities -> None, recursively: strict JSON for SQLite columns and other tools."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


# The run-level flag that the load client fell behind its arrival schedule: its numbers are suspect.
CLIENT_BEHIND = "client_behind"
LATENCIES = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "median", "p90", "p95", "p99")
_RUN_KEYS = (
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "goodput",
    "goodput_ratio",
    "completed",
    "failed",
    "error_rate",
    "duration_s",
    "schedule_lag_p50_ms",
    "schedule_lag_p99_ms",
    "schedule_lag_max_ms",
    CLIENT_BEHIND,
)
BASE_KEYS: tuple[str, ...] = tuple(f"{m}_{s}_ms" for m in LATENCIES for s in STATS) + _RUN_KEYS
# Run-level facts are not repeated per class.
PER_CLASS_KEYS: tuple[str, ...] = tuple(k for k in BASE_KEYS if k not in ("duration_s", CLIENT_BEHIND))


# What an SLO bound is: a number here. A scenario may state bounds relative to a calibration
# (`GoodputSLO[Threshold]`, `SLOSpec[Threshold]` in search.scenario), resolved to numbers before
# anything is measured or scored, so the rules of these types are written once.
Bound = TypeVar("Bound", default=float)


class GoodputSLO(BaseModel, Generic[Bound]):
    """Per-request thresholds in ms (any subset); a request is good if it meets all given."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_ms: Bound | None = None
    tpot_ms: Bound | None = None
    e2el_ms: Bound | None = None

    @property
    def empty(self) -> bool:
        return self.ttft_ms is None and self.tpot_ms is None and self.e2el_ms is None


@dataclass(frozen=True)
class LatencyStats:
    mean: float = NAN
    median: float = NAN
    p90: float = NAN
    p95: float = NAN
    p99: float = NAN

    @classmethod
    def of_seconds(cls, values, above: int = 0) -> LatencyStats:
        """Statistics of `values` (s) in ms, with `above` more values known only to lie above all
        of them (failed requests): a statistic that depends on one of those is NaN."""
        ms = np.sort(np.asarray(values, dtype=float)) * 1000.0
        n = ms.size + above
        if n == 0:
            return cls()
        if not above:
            p = np.percentile(ms, [50, 90, 95, 99])
            return cls(float(ms.mean()), float(p[0]), float(p[1]), float(p[2]), float(p[3]))
        return cls(NAN, *(_censored_percentile(ms, n, q) for q in (0.5, 0.9, 0.95, 0.99)))


def _censored_percentile(ms: np.ndarray, n: int, q: float) -> float:
    """numpy's linear q-quantile of `n` values whose lowest are `ms` (sorted) and the rest unknown
    above them: NaN where it would read an unknown one."""
    h = (n - 1) * q
    lo = math.floor(h)
    frac = h - lo
    if lo >= ms.size or (frac > 0 and lo + 1 >= ms.size):
        return NAN
    if frac == 0:
        return float(ms[lo])
    return float(ms[lo] + frac * (ms[lo + 1] - ms[lo]))


@dataclass
class RunMetrics:
    ttft: LatencyStats
    tpot: LatencyStats
    itl: LatencyStats
    e2el: LatencyStats
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    goodput: float
    goodput_ratio: float
    completed: int
    failed: int
    error_rate: float
    duration_s: float
    schedule_lag_p50_ms: float
    schedule_lag_p99_ms: float
    schedule_lag_max_ms: float
    client_behind: bool
    total_input_tokens: int = 0
    total_output_tokens: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    per_class: dict[str, RunMetrics] = field(default_factory=dict)
    server: ServerDiagnostics | None = None

    def _base(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name in LATENCIES:
            stats: LatencyStats = getattr(self, name)
            for s in STATS:
                out[f"{name}_{s}_ms"] = getattr(stats, s)
        for key in _RUN_KEYS:
            out[key] = float(getattr(self, key))
        return out

    def flat(self) -> dict[str, float]:
        """Metric name -> value: BASE_KEYS, `<key>@<class>` per class, `server_*` (NaN if not scraped)."""
        out = self._base()
        for cls, m in self.per_class.items():
            base = m._base()
            for key in PER_CLASS_KEYS:
                out[class_key(key, cls)] = base[key]
        server = self.server.flat() if self.server is not None else dict.fromkeys(SERVER_KEYS, NAN)
        out.update(server)
        return out


def _is_good(r: RequestRecord, slo: GoodputSLO | None) -> bool:
    if slo is None or slo.empty:
        return True
    ttft = r.ttft * 1000
    e2el = r.e2el * 1000
    tpot = r.tpot * 1000
    return (
        (slo.ttft_ms is None or ttft <= slo.ttft_ms)
        and (slo.tpot_ms is None or tpot <= slo.tpot_ms)
        and (slo.e2el_ms is None or e2el <= slo.e2el_ms)
    )


def _per(value: float, duration_s: float) -> float:
    return value / duration_s if duration_s > 0 else NAN


def _compute(
    records: list[RequestRecord],
    duration_s: float,
    goodput: GoodputSLO | None,
    lag_limit_ms: float,
    failed_above: bool = False,
) -> RunMetrics:
    sent = [r for r in records if not math.isnan(r.send_time)]
    ok = [r for r in sent if r.ok]
    failed = [r for r in sent if r.failed] if failed_above else []
    gaps = [np.diff(r.chunk_times) for r in ok if len(r.chunk_times) > 1]
    itls = np.concatenate(gaps) if gaps else np.empty(0)
    # ITL pools gaps per chunk: a failed request weighs as many gaps as it asked tokens for.
    itl_above = sum(max(1, r.expected_output_tokens - 1) for r in failed)
    out_tokens = sum(r.output_tokens for r in ok)
    in_tokens = sum(r.input_tokens for r in ok)
    good = sum(1 for r in ok if _is_good(r, goodput))
    lags_ms = np.array([r.schedule_lag for r in sent], dtype=float) * 1000.0
    if lags_ms.size:
        lag50, lag99 = (float(x) for x in np.percentile(lags_ms, [50, 99]))
        lagmax = float(lags_ms.max())
    else:
        lag50 = lag99 = lagmax = NAN
    n_sent = len(sent)
    return RunMetrics(
        ttft=LatencyStats.of_seconds([r.ttft for r in ok], len(failed)),
        tpot=LatencyStats.of_seconds([r.tpot for r in ok if r.output_tokens > 1], len(failed)),
        itl=LatencyStats.of_seconds(itls, itl_above),
        e2el=LatencyStats.of_seconds([r.e2el for r in ok], len(failed)),
        request_throughput=_per(len(ok), duration_s),
        output_throughput=_per(out_tokens, duration_s),
        total_token_throughput=_per(in_tokens + out_tokens, duration_s),
        goodput=_per(good, duration_s),
        goodput_ratio=good / n_sent if n_sent else NAN,
        completed=len(ok),
        failed=n_sent - len(ok),
        error_rate=(n_sent - len(ok)) / n_sent if n_sent else NAN,
        duration_s=float(duration_s),
        schedule_lag_p50_ms=lag50,
        schedule_lag_p99_ms=lag99,
        schedule_lag_max_ms=lagmax,
        client_behind=bool(lag99 > lag_limit_ms),
        total_input_tokens=int(in_tokens),
        total_output_tokens=int(out_tokens),
        error_kinds=dict(Counter(r.error_kind for r in sent if not r.ok and r.error_kind)),
    )


def timed_tpot_median_ms(records: list[RequestRecord]) -> tuple[float | None, float]:
    """TPOT median (ms) over the requests whose decode the client could time (`decode_timed`),
    and their share of the completed multi-token requests (None: none was timed)."""
    multi = [r for r in records if r.ok and r.output_tokens > 1]
    timed = [r.tpot for r in multi if r.decode_timed]
    share = len(timed) / len(multi) if multi else 0.0
    return (float(np.median(timed)) * 1000.0 if timed else None), share


def compute_metrics(
    records: list[RequestRecord],
    duration_s: float,
    goodput: GoodputSLO | None = None,
    *,
    class_names: list[str] | None = None,
    lag_limit_ms: float = DEFAULT_LAG_LIMIT_MS,
    server: ServerDiagnostics | None = None,
    failed_above: bool = False,
) -> RunMetrics:
    """Metrics of the measured (non-warmup, sent, not cut short by us) records, overall and per class.

    `class_names`: the workload's classes, so a class that got no request still has (NaN) keys.
    `client_behind` is set when the p99 schedule lag exceeds `lag_limit_ms`.
    `failed_above`: a failed request counts as a latency above every measured one (the module
    docstring); False: left out, as vLLM does.
    """
    measured = [r for r in records if not r.warmup and not r.aborted]
    metrics = _compute(measured, duration_s, goodput, lag_limit_ms, failed_above)
    names = list(class_names or [])
    for r in measured:
        if r.class_name not in names:
            names.append(r.class_name)
    for name in names:
        metrics.per_class[name] = _compute(
            [r for r in measured if r.class_name == name], duration_s, goodput, lag_limit_ms, failed_above
        )
    metrics.server = server
    return metrics


def metric_names(class_names: Sequence[str] = ()) -> list[str]:
    """Every key `RunMetrics.flat()` can hold for a workload with these classes."""
    return list(BASE_KEYS) + [class_key(k, c) for c in class_names for k in PER_CLASS_KEYS] + list(SERVER_KEYS)
