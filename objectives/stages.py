"""Several load stages on one server start: the target load, then a capacity search.

A trial's server is started once. The first stage is the scenario's own load (warm-up
included, excluded from the metrics): latency objectives are read there. Then, when the
scenario has a `capacity:` section, further stages of `stage_s` seconds each probe other
request rates, chosen by `objectives.capacity` from the SLO margins measured so far, until the
highest rate that meets every SLO is bracketed tightly enough or the stage budget is spent.
A stage below the target rate is lengthened so that it holds as many requests as a stage at the
target rate (`stage_s` x the target rate), up to `max_stage_s`: its percentiles rest on as many
requests as the others'. The search goes down to `floor_fraction` of the target rate.

In the search phase (`screen`), a trial stops once it cannot matter: a target stage that missed
an SLO runs no capacity stages (the confirmation searches below the target), and a bracket whose
high end still leaves the trial dominated by a member of the study's front is not narrowed.

Between stages the server is left to drain (`/metrics`: nothing running or waiting) and its
prefix cache is reset (`POST /reset_prefix_cache`, a dev endpoint the tuner's servers enable),
so one stage's queue and cached prompts do not flatter or burden the next. Every stage sends
the same request sequence (the workload's seed) at its own rate: common random numbers, so two
rates differ by their rate only.

With `early_abort` (`likely`, the default, or `certain`), a stage stops as soon as its SLO verdict
is very likely, or certain (`objectives.early_abort`): a measurement for the capacity search, not a
failure. A capacity stage stopped as a likely pass counts as passed. The confirmation's target
stages run in full (`full_target`), since the verdict pools their requests.

Every stage keeps its measured requests (`StageResult.samples`, `loadgen.request_samples`),
so a stopping rule can be replayed on stored stages (`benchmarks/bench_stopping.py`).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from loadgen import (
    GaugeSample,
    GoodputSLO,
    LoadResult,
    ProgressWatch,
    WorkloadSpec,
    engine_moved,
    fetch_metrics_text,
    request_samples,
    run_load,
    scan_gauges,
    traced,
)
from objectives import capacity as cap
from objectives.capacity import CAPACITY_KEYS, SLO_CAPACITY_RPS, TARGET_ABORTED
from objectives.early_abort import CERTAIN, OFF, abort_check
from objectives.scoring import SLOSpec, slo_key

TARGET, CAPACITY = "target", "capacity"
# Below this many requests a stage measures nothing worth bisecting on: no floor goes below the
# rate that gives a stage of `max_stage_s` this many.
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
        "likely",
        description="stop a stage once its SLO verdict is 95% likely (likely), certain (certain), or never (off)",
    )
    idle_timeout_s: float = Field(60.0, gt=0, description="longest wait for the server to drain")
    floor_fraction: float = Field(
        0.25,
        gt=0,
        lt=1,
        description=(
            "the lowest rate searched, as a fraction of the target rate: a config that misses the SLO "
            "there has capacity 0"
        ),
    )
    max_stage_s: float | None = Field(
        None,
        gt=0,
        description=(
            "the longest a stage below the target rate is lengthened to (s); default stage_s / floor_fraction, "
            "so every stage down to the floor holds as many requests as one at the target rate"
        ),
    )
    signal_steps: bool = Field(
        True,
        description=(
            "step up from a passing stage by what its SLO margin says (objectives.capacity.signal_factor) "
            "instead of by `step`"
        ),
    )

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

    @model_validator(mode="after")
    def _longest_stage(self) -> CapacitySpec:
        if self.max_stage_s is not None and self.max_stage_s < self.stage_s:
            raise ValueError(f"max_stage_s ({self.max_stage_s:g}) must be at least stage_s ({self.stage_s:g})")
        return self

    @property
    def longest_stage_s(self) -> float:
        return self.max_stage_s if self.max_stage_s is not None else self.stage_s / self.floor_fraction

    def stage_seconds(self, rate: float, target_rate: float | None) -> float:
        """A capacity stage's sending window: `stage_s`, lengthened below the target rate to hold
        `stage_s` x `target_rate` requests, within `longest_stage_s`."""
        if not target_rate or rate >= target_rate:
            return self.stage_s
        return min(self.longest_stage_s, self.stage_s * target_rate / rate)

    def floor(self, target_rate: float | None) -> float:
        """The lowest rate the search measures (req/s). Without a target rate, stages are not
        lengthened and the floor is where a `stage_s` stage holds MIN_STAGE_REQUESTS."""
        if not target_rate:
            return MIN_STAGE_REQUESTS / self.stage_s
        return max(self.floor_fraction * target_rate, MIN_STAGE_REQUESTS / self.longest_stage_s)

    def search_settings(self, target_rate: float | None = None) -> cap.SearchSettings:
        return cap.SearchSettings(
            step=self.step,
            precision=self.precision,
            max_stages=self.max_stages,
            min_rate=self.floor(target_rate),
            signal_steps=self.signal_steps,
        )


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
    samples: dict[str, list] | None = None  # the measured requests (loadgen.request_samples)
    stopped_passing: bool = False  # `aborted` says why: every SLO very likely met
    raised: str | None = None  # the metric an abort raised to its certain lower bound (an "at least")

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
    out = {SLO_CAPACITY_RPS: estimate.rps}
    for key, source in (
        ("slo_capacity_output_throughput", "output_throughput"),
        ("slo_capacity_total_token_throughput", "total_token_throughput"),
        ("slo_capacity_goodput", "goodput"),
    ):
        value = low.metrics.get(source, math.nan) if low is not None else 0.0
        out[key] = cap.at_capacity(estimate.low, value, estimate.rps)
    return out


def at_rate(workload: WorkloadSpec, rate: float, duration_s: float) -> WorkloadSpec:
    """The workload's arrival process at another mean rate, for `duration_s`, without warm-up."""
    arrival = workload.arrival
    mean = arrival.mean_rate()
    if arrival.rate is None or not mean:
        raise ValueError("a load stage at another rate needs an open-loop workload with a resolved rate")
    scaled = arrival.model_copy(update={"rate": arrival.rate * rate / mean})
    return workload.model_copy(
        update={"arrival": scaled, "duration_s": duration_s, "num_requests": None, "warmup_requests": 0}
    )


async def wait_idle(base_url: str, timeout_s: float, watch: ProgressWatch | None = None) -> tuple[float, str | None]:
    """Wait until the server runs and queues nothing. (seconds waited, a note if it never did).

    `watch` sees the polls, and the engine's progress they show: gauges that moved (requests
    let go of, KV blocks freed) or none left. A hung engine's gauges stand still, so the
    requests an aborted stage cut off stay owed (`loadgen.stall`)."""
    import aiohttp

    t0 = time.perf_counter()
    seen: GaugeSample | None = None
    async with aiohttp.ClientSession(trace_configs=traced(watch)) as session:
        while True:
            text = await fetch_metrics_text(session, base_url, timeout_s=5)
            if text is None:
                return time.perf_counter() - t0, "no /metrics: did not wait for the server to drain"
            g = scan_gauges(text)
            if math.isnan(g.running):
                return time.perf_counter() - t0, "no request gauges in /metrics: did not wait to drain"
            if watch is not None and engine_moved(seen, g):
                watch.progress(g.t)
            if g.running == 0 and g.waiting == 0:
                return time.perf_counter() - t0, None
            seen = g
            waited = time.perf_counter() - t0
            if waited > timeout_s:
                return waited, (
                    f"server still busy after {timeout_s:g} s ({g.running:.0f} running, "
                    f"{g.waiting:.0f} waiting): the next stage starts anyway"
                )
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
                async with session.post(
                    base_url + "/reset_prefix_cache", timeout=aiohttp.ClientTimeout(total=10)
                ) as resp:
                    if resp.status == 200:
                        body = await resp.read()  # older vLLM answers 200 with no body
                        if not body.strip() or json.loads(body).get("success"):
                            return True
                    elif resp.status != 409:  # 409: refused while blocks are held, retry
                        return None
            except (TimeoutError, aiohttp.ClientError, ValueError, AttributeError):
                return None
            await asyncio.sleep(IDLE_POLL_S)
    return False


StageCallback = Callable[[str], None]


def optimistic_metrics(stages: Sequence[StageResult], probes: Sequence[cap.Probe]) -> dict[str, float] | None:
    """The best a trial can still reach: its target-stage metrics, and its capacity metrics at
    the high end of its bracket (None while no rate failed: its capacity is unbounded so far)."""
    low, high = cap.bracket(probes)
    if high is None or low is None:
        return None
    best = cap.CapacityEstimate(high.rate, low.rate, high.rate, len(probes), "")
    return {**stages[0].metrics, **capacity_metrics(best, stages)}


def search_step(
    stages: Sequence[StageResult],
    settings: cap.SearchSettings,
    *,
    hint: Sequence[float] = (),
    screen: bool = False,
    front: cap.Front | None = None,
) -> tuple[float | None, str | None]:
    """(the next stage's rate, None when the search is done; why it stopped before its precision
    or budget, if it did). In the search phase (`screen`) a trial that cannot matter stops: a
    missed target, or a bracket that can no longer reach `front`."""
    probes = [s.probe for s in stages]
    if screen and not stages[0].passed:
        return None, "target missed (screen)"
    rate = cap.next_rate(probes, settings, hint)
    if rate is not None and screen and front is not None and front.points:
        best = optimistic_metrics(stages, probes)
        point = front.dominating(best) if best is not None else None
        if best is not None and point is not None:
            shown = ", ".join(f"{m} {point[m]:.4g}" for m in front.directions)
            return None, f"cannot reach the front (a member has {shown}; this trial at best {best_text(best, front)})"
    return rate, None


def best_text(best: dict[str, float], front: cap.Front) -> str:
    return ", ".join(f"{m} {best[m]:.4g}" for m in front.directions)


def final_estimate(
    stages: Sequence[StageResult], settings: cap.SearchSettings, stop_reason: str | None
) -> cap.CapacityEstimate:
    """The capacity the stages say; a screened target miss is "below the target rate"."""
    if stop_reason == "target missed (screen)":
        return cap.below_target(stages[0].rate)
    estimate = cap.estimate([s.probe for s in stages], floor=settings.min_rate)
    if stop_reason is None:
        return estimate
    return replace(estimate, summary=f"{estimate.summary}; stopped: {stop_reason}", stop_reason=stop_reason)


async def run_stages(
    base_url: str,
    model: str | None,
    workload: WorkloadSpec,
    slos: Sequence[SLOSpec],
    spec: CapacitySpec,
    *,
    tokenizer_path: str | Path | None = None,
    goodput: GoodputSLO | None = None,
    on_stage: StageCallback = lambda _: None,
    watch: ProgressWatch | None = None,
    capacity_hint: Sequence[float] = (),
    screen: bool = False,
    front: cap.Front | None = None,
    full_target: bool = False,
) -> StagedRun:
    """The target stage, then capacity stages until the search is done (see the module docstring;
    `capacity_hint`: rates an earlier measurement bracketed the capacity at, `capacity.next_rate`;
    `screen`, `front`: the search phase's stops, `search_step`). `watch` sees every request of
    every stage, the drains and resets between them included."""
    target_rate = workload.arrival.mean_rate()
    if target_rate is None:
        raise ValueError("a capacity search needs an open-loop workload with a resolved rate")
    held = stage_slos(slos)
    settings = spec.search_settings(target_rate)
    stages: list[StageResult] = []
    target: LoadResult | None = None
    rate: float | None = target_rate
    stop_reason: str | None = None
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
        stage_wl = workload if index == 0 else at_rate(workload, rate, spec.stage_seconds(rate, target_rate))
        on_stage(f"stage {index + 1}/{limit} ({kind}) at {rate:.3g} req/s")
        # `full_target` (the confirmation): the target stage runs in full, since its requests are
        # the verdict's pooled percentiles and a stage cut short reads its early, less loaded part.
        stoppable = spec.early_abort != OFF and (kind == CAPACITY or not full_target)
        check = abort_check(held, rate, spec.early_abort, may_pass=kind == CAPACITY) if stoppable else None
        result = await run_load(
            base_url, model, stage_wl, tokenizer_path=tokenizer_path, goodput=goodput, abort=check, watch=watch
        )
        flat = result.flat_metrics()
        abort = result.abort
        stopped_passing = abort is not None and abort.passed
        raised = None
        if abort is not None and abort.metric is not None:
            # The cut-short requests are left out of the partial numbers, so the metric that
            # stopped the stage would look better than it was: raise it to what was certain.
            partial = flat.get(abort.metric, math.nan)
            if math.isnan(abort.value):  # failed requests reach it: unknown, never a number
                flat[abort.metric] = math.nan
            elif not partial >= abort.value:
                flat[abort.metric], raised = abort.value, abort.metric
        worst, violated = margin(flat, held)
        if abort is not None and not stopped_passing:  # a miss: by at least the abort's bound
            known = [m for m in (worst, abort.margin) if math.isfinite(m) and m > 0]
            worst = max(known) if known else math.nan
        stages.append(
            StageResult(
                index=index,
                kind=kind,
                rate=rate,
                planned_s=result.planned_s,
                elapsed_s=result.duration_s,
                margin=worst,
                violations=violated,
                metrics=flat,
                server_diagnostics=result.server_diagnostics(),
                aborted=result.aborted,
                idle_wait_s=idle_s,
                prefix_cache_reset=reset,
                requests_planned=result.requests_planned,
                requests_sent=len(result.records),
                notes=notes + result.notes,
                samples=request_samples(result.records, result.start) if result.records else None,
                stopped_passing=stopped_passing,
                raised=raised,
            )
        )
        if index == 0:
            target = result
        rate, stop_reason = search_step(stages, settings, hint=capacity_hint, screen=screen, front=front)
    if stop_reason is not None:
        stages[-1].notes.append(f"trial stopped after this stage: {stop_reason}")
    assert target is not None  # the target stage always runs: the loop starts at the target rate
    return StagedRun(stages, target, final_estimate(stages, settings, stop_reason))
