"""How a load run is made (`LoadOptions`): its client, its tokenizer, what it scrapes and scores
against, and who may watch or stop it. The abort check (`AbortCheck`) is asked about the records
of an open loop as it runs; the `Abort` it returns says why the run stops and how certain its
outcome is (the rules that decide it are `objectives.early_abort`'s; the load run knows only this
shape)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from loadgen.metrics import GoodputSLO
from loadgen.prompts import Request
from loadgen.request_record import RequestRecord
from loadgen.server_metrics import GaugeSample
from loadgen.stall import ProgressWatch


@dataclass(frozen=True)
class Abort:
    """Why a stage stopped early, and by how much it is certain to miss (a lower bound on the
    normalized SLO violation, as `scoring.SLOSpec.violation`; NaN when no rule bounds it).
    `passed`: stopped because every SLO is very likely met (a capacity stage), not missed.
    `drain`: stop sending but let the requests in flight finish, so the run ends as one planned
    to end here would (its verdict is decided: the rest of the schedule would not change it)."""

    reason: str
    margin: float = math.nan
    metric: str | None = None  # the SLO's metric, and a certain lower bound on its final value
    value: float = math.nan
    passed: bool = False
    drain: bool = False


AbortCheck = Callable[[Sequence[RequestRecord], float, Sequence[GaugeSample]], "Abort | None"]


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
