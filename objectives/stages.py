"""Several load stages on one server start: the target load, then a capacity search.

A trial's server is started once. The first stage is the scenario's own load (warm-up
included, excluded from the metrics): latency objectives are read there. Then, when the
scenario has a `capacity:` section, further stages of `stage_s` seconds each probe other
request rates, chosen by `objectives.capacity` from the SLO margins measured so far, until the
highest rate that meets every SLO is bracketed tightly enough or the stage budget is spent.

Between stages the server is left to drain (`/metrics`: nothing running or waiting) and its
prefix cache is reset (`POST /reset_prefix_cache`, a dev endpoint the tuner's servers enable),
so one stage's queue and cached prompts do not flatter or burden the next. Every stage sends
the same request sequence (the workload's seed) at its own rate: common random numbers, so two
rates differ by their rate only.

With `early_abort` (`likely`, the default, or `certain`), a stage stops as soon as its SLO verdict
is very likely, or certain (`objectives.early_abort`): a measurement for the capacity search, not a
failure. A capacity stage stopped as a likely pass counts as passed.

Every stage keeps its measured requests (`StageResult.samples`, `objectives.load.request_samples`),
so a stopping rule can be replayed on stored stages (`benchmarks/stopping_replay.py`).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator

from objectives import capacity as cap
from objectives.capacity import CAPACITY_KEYS, TARGET_ABORTED
from objectives.early_abort import CERTAIN, OFF, abort_check
from objectives.load import LoadResult, request_samples, run_load
from objectives.load import GoodputSLO
from objectives.scoring import SLOSpec, slo_key
from objectives.load import fetch_metrics_text, scan_gauges
from objectives.load import ProgressWatch, traced
from objectives.load import WorkloadSpec

TARGET, CAPACITY = "target", "capacity"
# Below this many requests a stage measures nothing worth bisecting on: the search's floor.
MIN_STAGE_REQUESTS = 10
IDLE_POLL_S = 0.25
RESET_ATTEMPTS = 5


class CapacitySpec(BaseModel):
    """A scenario's `capacity:` section: how far a trial searches for its capacity under the SLO."""

    model_config = ConfigDict(extra="forbid")

    stage_s: float = Field(15.0, gt=0, description="sending window of each capacity stage (s)")
    max_stages: int = Field(5, ge=1, le=12, description="capacity stages after the target stage")
    precision: float = Field(0.1, gt=0, lt=1, description="stop when high / low - 1 is at most this")
    step: float = Field(2.0, gt=1, description="bracketing factor from the target rate")
    early_abort: Literal["likely", "certain", "off"] = Field(
        "likely", description="stop a stage once its SLO verdict is 95% likely (likely), certain (certain), "
                              "or never (off)")
    idle_timeout_s: float = Field(60.0, gt=0, description="longest wait for the server to drain")

    @field_validator("early_abort", mode="before")
    @classmethod
    def _early_abort_words(cls, value: Any) -> Any:
        # true/false were the field's values before the likely rule: true meant the certain rule,
        # which an older scenario (and a stored study read again) keeps.
        if value is True or value == "true":
            return CERTAIN
        if value is False or value == "false":
            return OFF
        return value

    def search_settings(self) -> cap.SearchSettings:
        return cap.SearchSettings(step=self.step, precision=self.precision, max_stages=self.max_stages,
                                  min_rate=MIN_STAGE_REQUESTS / self.stage_s)


def stage_slos(slos: Sequence[SLOSpec]) -> list[SLOSpec]:
    """The SLOs a single stage is held to: all but those on the trial's capacity itself."""
    return [s for s in slos if s.metric not in CAPACITY_KEYS]


def margin(flat: dict[str, float], slos: Sequence[SLOSpec]) -> tuple[float, dict[str, float]]:
    """(worst normalized violation, the violated SLOs): <= 0 means every SLO was met."""
    violations = {slo_key(s): s.violation(flat.get(s.metric, math.nan)) for s in slos}
    worst = max(violations.values(), default=-math.inf)
    return worst, {k: v for k, v in violations.items() if v > 0}


@dataclass
class StageResult:
    index: int
    kind: str  # TARGET or CAPACITY
    rate: float  # offered requests/s (mean)
    planned_s: float  # the schedule's length
    elapsed_s: float  # start of sending to the last response (or to the abort)
    margin: float  # worst normalized SLO violation (aborted: a lower bound); NaN: not known
    violations: dict[str, float]
    metrics: dict[str, float]
    server_diagnostics: dict[str, float]
    aborted: str | None = None
    idle_wait_s: float = 0.0  # drain before this stage
    prefix_cache_reset: bool | None = None  # None: not attempted (first stage) or not available
    requests_planned: int = 0
    requests_sent: int = 0
    notes: list[str] = field(default_factory=list)
    samples: dict[str, list] | None = None  # the measured requests (objectives.load.request_samples)
    stopped_passing: bool = False  # `aborted` says why: every SLO very likely met (not stored: `passed` is)

    @property
    def passed(self) -> bool:
        return (self.aborted is None or self.stopped_passing) and self.margin <= 0

    @property
    def saved_s(self) -> float:
        """Sending time an early abort saved."""
        return max(0.0, self.planned_s - self.elapsed_s) if self.aborted else 0.0

    @property
    def probe(self) -> cap.Probe:
        """An aborted stage's margin is only a lower bound, and a loose one (the abort fires the
        moment the miss is certain, when it is barely over): interpolating on it would put the
        capacity at the failing rate. It enters the search as failing by an unknown margin, and
        the capacity is then the passing rate below it (`capacity.interpolate`)."""
        return cap.Probe(self.rate, math.nan if self.aborted and not self.stopped_passing else self.margin)

    def describe(self) -> str:
        head = f"{self.kind} stage at {self.rate:.3g} req/s"
        if self.aborted and self.passed:
            return f"{head}: met every SLO (stopped after {self.elapsed_s:.0f} s: {self.aborted})"
        if self.aborted:
            return f"{head}: violated (aborted after {self.elapsed_s:.0f} s: {self.aborted})"
        if self.passed:
            return f"{head}: met every SLO (margin {-self.margin:.0%})"
        return f"{head}: violated ({', '.join(self.violations)})"

    def as_row(self) -> dict[str, Any]:
        """The stored row's fields (storage.models.StageRecord)."""
        row = asdict(self)
        row.update(stage_index=row.pop("index"), passed=self.passed, saved_s=self.saved_s)
        del row["stopped_passing"]
        return row


@dataclass
class StagedRun:
    stages: list[StageResult]
    target: LoadResult
    capacity: cap.CapacityEstimate | None

    def metrics(self) -> dict[str, float]:
        """The target stage's metrics, with the capacity metrics when a search ran."""
        out = dict(self.stages[0].metrics)
        out[TARGET_ABORTED] = 1.0 if self.stages[0].aborted else 0.0
        if self.capacity is not None:
            out.update(capacity_metrics(self.capacity, self.stages))
        return out


def capacity_metrics(estimate: cap.CapacityEstimate, stages: Sequence[StageResult]) -> dict[str, float]:
    low = next((s for s in stages if s.passed and s.rate == estimate.low), None)
    out = {"slo_capacity_rps": estimate.rps}
    for key, source in (("slo_capacity_output_throughput", "output_throughput"),
                        ("slo_capacity_total_token_throughput", "total_token_throughput"),
                        ("slo_capacity_goodput", "goodput")):
        value = low.metrics.get(source, math.nan) if low is not None else 0.0
        out[key] = cap.at_capacity(estimate.low, value, estimate.rps)
    return out


def at_rate(workload: WorkloadSpec, rate: float, duration_s: float) -> WorkloadSpec:
    """The workload's arrival process at another mean rate, for `duration_s`, without warm-up."""
    arrival = workload.arrival
    scaled = arrival.model_copy(update={"rate": arrival.rate * rate / arrival.mean_rate()})
    return workload.model_copy(update={"arrival": scaled, "duration_s": duration_s, "num_requests": None,
                                       "warmup_requests": 0})


async def wait_idle(base_url: str, timeout_s: float,
                    watch: ProgressWatch | None = None) -> tuple[float, str | None]:
    """Wait until the server runs and queues nothing. (seconds waited, a note if it never did).

    `watch` sees the polls, and the engine's progress they show: gauges that moved (requests
    let go of, KV blocks freed) or none left. A hung engine's gauges stand still, so the
    requests an aborted stage cut off stay owed (`objectives.load.stall`)."""
    import aiohttp

    t0 = time.perf_counter()
    seen = None
    async with aiohttp.ClientSession(trace_configs=traced(watch)) as session:
        while True:
            text = await fetch_metrics_text(session, base_url, timeout_s=5)
            if text is None:
                return time.perf_counter() - t0, "no /metrics: did not wait for the server to drain"
            g = scan_gauges(text)
            if math.isnan(g.running):
                return time.perf_counter() - t0, "no request gauges in /metrics: did not wait to drain"
            idle = g.running == 0 and g.waiting == 0
            state = (g.running, g.waiting, None if math.isnan(g.kv_usage) else g.kv_usage)
            if watch is not None and (idle or (seen is not None and state != seen)):
                watch.progress(g.t)
            if idle:
                return time.perf_counter() - t0, None
            seen = state
            waited = time.perf_counter() - t0
            if waited > timeout_s:
                return waited, (f"server still busy after {timeout_s:g} s ({g.running:.0f} running, "
                                f"{g.waiting:.0f} waiting): the next stage starts anyway")
            await asyncio.sleep(IDLE_POLL_S)


# What a vLLM server needs in its environment to serve `POST /reset_prefix_cache`.
RESET_ENDPOINT_ENV = {"VLLM_SERVER_DEV_MODE": "1"}


async def reset_prefix_cache(base_url: str, watch: ProgressWatch | None = None) -> bool | None:
    """POST /reset_prefix_cache (retried while blocks are still held). None: not available.
    `watch` sees the requests."""
    import aiohttp

    async with aiohttp.ClientSession(trace_configs=traced(watch)) as session:
        for _ in range(RESET_ATTEMPTS):
            try:
                async with session.post(base_url + "/reset_prefix_cache",
                                        timeout=aiohttp.ClientTimeout(total=10)) as resp:
                    if resp.status == 200:
                        body = await resp.read()  # older vLLM answers 200 with no body
                        if not body.strip() or json.loads(body).get("success"):
                            return True
                    elif resp.status != 409:  # 409: refused while blocks are held, retry
                        return None
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, AttributeError):
                return None
            await asyncio.sleep(IDLE_POLL_S)
    return False


StageCallback = Callable[[str], None]


async def run_stages(base_url: str, model: str | None, workload: WorkloadSpec, slos: Sequence[SLOSpec],
                     spec: CapacitySpec, *, tokenizer_path: str | Path | None = None,
                     goodput: GoodputSLO | None = None,
                     on_stage: StageCallback = lambda _: None,
                     watch: ProgressWatch | None = None,
                     capacity_hint: Sequence[float] = ()) -> StagedRun:
    """The target stage, then capacity stages until the search is done (see the module docstring;
    `capacity_hint`: rates an earlier measurement bracketed the capacity at, `capacity.next_rate`).
    `watch` sees every request of every stage, the drains and resets between them included."""
    if workload.arrival.mean_rate() is None:
        raise ValueError("a capacity search needs an open-loop workload with a resolved rate")
    held = stage_slos(slos)
    settings = spec.search_settings()
    stages: list[StageResult] = []
    target: LoadResult | None = None
    rate: float | None = workload.arrival.mean_rate()
    limit = 1 + spec.max_stages
    while rate is not None:
        index = len(stages)
        kind = TARGET if index == 0 else CAPACITY
        idle_s, reset, notes = 0.0, None, []
        if index:
            idle_s, note = await wait_idle(base_url, spec.idle_timeout_s, watch)
            notes += [note] if note else []
            reset = await reset_prefix_cache(base_url, watch)
            if reset is None:
                notes.append("no /reset_prefix_cache on this server: prompts cached by earlier stages stay")
        stage_wl = workload if index == 0 else at_rate(workload, rate, spec.stage_s)
        on_stage(f"stage {index + 1}/{limit} ({kind}) at {rate:.3g} req/s")
        check = (abort_check(held, rate, spec.early_abort, may_pass=kind == CAPACITY)
                 if spec.early_abort != OFF else None)
        result = await run_load(base_url, model, stage_wl, tokenizer_path=tokenizer_path, goodput=goodput,
                                abort=check, watch=watch)
        flat = result.flat_metrics()
        abort = result.abort
        stopped_passing = abort is not None and abort.passed
        if abort is not None and abort.metric is not None:
            # The cut-short requests are left out of the partial numbers, so the metric that
            # stopped the stage would look better than it was: raise it to what was certain.
            partial = flat.get(abort.metric, math.nan)
            flat[abort.metric] = abort.value if not partial >= abort.value else partial
        worst, violated = margin(flat, held)
        if abort is not None and not stopped_passing:  # a miss: by at least the abort's bound
            known = [m for m in (worst, result.abort.margin) if math.isfinite(m) and m > 0]
            worst = max(known) if known else math.nan
        stages.append(StageResult(
            index=index, kind=kind, rate=rate, planned_s=result.planned_s, elapsed_s=result.duration_s,
            margin=worst, violations=violated, metrics=flat, server_diagnostics=result.server_diagnostics(),
            aborted=result.aborted, idle_wait_s=idle_s, prefix_cache_reset=reset,
            requests_planned=result.requests_planned,
            requests_sent=len(result.records), notes=notes + result.notes,
            samples=request_samples(result.records, result.start) if result.records else None,
            stopped_passing=stopped_passing))
        if index == 0:
            target = result
        rate = cap.next_rate([s.probe for s in stages], settings, capacity_hint)
    estimate = cap.estimate([s.probe for s in stages])
    return StagedRun(stages, target, estimate)
