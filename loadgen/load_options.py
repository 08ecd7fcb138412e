"""How one load run is made (`LoadOptions`), beside the server it runs against and the workload it
sends: the client, the tokenizer, what it scrapes and scores against, and who may stop or watch it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from loadgen.abort import AbortCheck
from loadgen.metrics import GoodputSLO
from loadgen.prompts import Request
from loadgen.stall import ProgressWatch


@dataclass(frozen=True)
class LoadOptions:
    """The defaults are a plain measured run: the aiohttp client, /metrics scraped, no abort.

    `tokenizer_path`: a directory with the model's tokenizer; else the one the server names as
    its model's root, or the model id, where either is a local directory.

    `lag_limit_ms`: p99 schedule lag that flags `client_behind`; default: 10% of the mean gap
    between arrivals, at least 5 ms (`metrics.lag_limit_ms`).

    `requests`: prebuilt measured requests (a study reuses them across trials); built by the run
    where absent or too few.

    `abort` (open loops only): called twice a second with the records so far; an `Abort` returned
    stops the run there (`LoadResult.abort`), its unfinished requests left out of the metrics
    (one that drains stops the sending only: the requests in flight finish and count).

    `avoid_engine_cpus`: while the client runs, keep its thread off the CPUs that a local vLLM
    engine's workers are pinned to (`engine_pinned_cpus`), where it would wait behind them.
    Default: on, unless the environment sets AUTOTUNE_AVOID_ENGINE_CPUS=0.

    `watch`: handed the warm-up's records, then the measured ones, as each phase starts, and
    every request of the run's own (the model, /tokenize, /metrics, the connections' /health),
    so a watcher can tell a hung server (`loadgen.stall`) while the run is in progress. With a
    watch, the run hands back nothing measured on a server that hung: before its result, the
    server shows it is alive or `loadgen.liveness.ServerHung` is raised.
    """

    client: str = "aiohttp"
    tokenizer_path: str | Path | None = None
    scrape_metrics: bool = True
    sample_period_s: float = 1.0  # how often the server's gauges are read during the run
    goodput: GoodputSLO | None = None
    lag_limit_ms: float | None = None
    requests: Sequence[Request] | None = None
    abort: AbortCheck | None = None
    avoid_engine_cpus: bool | None = None
    watch: ProgressWatch | None = None
