"""Measured once per study, on the vLLM-defaults baseline: what "relative" means on this machine.

* unloaded latency: each request class alone, one request at a time -> medians that
  `x_unloaded` thresholds multiply;
* saturation: the whole mix, closed loop at high concurrency -> the request rate that
  `capacity_fraction` loads are a fraction of.

Both are measured `repeats` times in alternating rounds on the one server; the reference is
each metric's median over the rounds, and the rounds' spread says how far it could move.
The result is stored with the study, so a resumed study replays exactly the same load.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from objectives.load import LATENCY_FAMILIES, MetricName, class_key
from objectives import statistics as st
from objectives.load import run_async, run_load
from objectives.stages import RESET_ENDPOINT_ENV, reset_prefix_cache
from objectives.load import GoodputSLO
from objectives.scoring import SLOSpec
from objectives.load import ProgressWatch, stall_bound_s
from objectives.load import ArrivalSpec, WorkloadSpec
from search.scenario import Calibration, RelativeThreshold, Scenario, Threshold, unloaded_reference
from search.serving import LaunchContext, ServerArgs, ServerFailed, launch, while_serving


class CalibrationFailed(RuntimeError):
    """The calibration server failed, or the load generator did, before a reference was measured."""


@dataclass
class CalibrationResult:
    unloaded: dict[str, float]  # flat metrics, overall and per class (@name): medians over rounds
    saturation: dict[str, float]  # the round whose capacity is the median
    capacity_rps: float  # median over rounds
    seconds: float
    # Each round's capacity and unloaded medians (what the spread is computed from).
    rounds: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CalibrationResult":
        return cls(**d)

    @classmethod
    def from_rounds(cls, rounds: list[dict[str, Any]], saturations: list[dict[str, float]],
                    seconds: float) -> "CalibrationResult":
        """The reference from repeated rounds: each metric's median, and the saturation run of
        the round whose capacity is the median (an odd count: one of the rounds)."""
        capacities = [r["capacity_rps"] for r in rounds]
        median_round = sorted(range(len(rounds)), key=lambda i: capacities[i])[len(rounds) // 2]
        keys = rounds[0]["unloaded"].keys()
        return cls(unloaded={k: float(np.median([r["unloaded"][k] for r in rounds])) for k in keys},
                   saturation=saturations[median_round], capacity_rps=float(np.median(capacities)),
                   seconds=seconds, rounds=rounds)

    def slowest_unloaded_ttft_ms(self) -> float | None:
        """The largest unloaded TTFT median over the request classes (the stall bound's unit)."""
        values = [v for k, v in self.unloaded.items()
                  if MetricName.parse(k).base == "ttft_median_ms" and v is not None and math.isfinite(v)]
        return max(values) if values else None

    def spread(self, key: str = "capacity_rps") -> st.Interval | None:
        """The reference's median over rounds with its interval (None from a single round);
        `key`: capacity_rps or an unloaded metric."""
        values = [r.get(key, r.get("unloaded", {}).get(key)) for r in self.rounds]
        values = [v for v in values if v is not None]
        return st.median_interval(values) if len(values) > 1 else None

    def cv(self, key: str = "capacity_rps") -> float:
        return st.coefficient_of_variation(
            [r.get(key, r.get("unloaded", {}).get(key)) for r in self.rounds])


def _closed(workload: WorkloadSpec, concurrency: int, requests: int, classes=None, warmup=0) -> WorkloadSpec:
    return workload.model_copy(update={
        "arrival": ArrivalSpec(mode="closed", concurrency=concurrency),
        "num_requests": requests, "duration_s": None, "warmup_requests": warmup,
        **({"classes": classes} if classes is not None else {}),
    })


def saturation_workload(workload: WorkloadSpec, settings: Calibration | None = None) -> WorkloadSpec:
    """The whole mix in a saturating closed loop: the capacity that `capacity_fraction` loads are
    a fraction of. The study's calibration and `autotune load`'s capacity probe both run this,
    with the scenario's `calibration:` settings (or their defaults)."""
    settings = settings or Calibration()
    return _closed(workload, settings.saturation_concurrency, settings.saturation_requests, warmup=4)


def calibrate(scenario: Scenario, ctx: LaunchContext, baseline: ServerArgs, run_dir: Path,
              on_phase=lambda _: None) -> CalibrationResult:
    """Measure the reference on a server of `baseline`'s flags, watched as a trial's is: its
    death, or the load generator's error, raises CalibrationFailed naming the cause."""
    on_phase("starting the vLLM-defaults server")
    server = launch(ctx, baseline, run_dir / "calibration" / "server.log",
                    startup_timeout_s=scenario.server.startup_timeout_s, env=RESET_ENDPOINT_ENV)
    try:
        with server:
            try:
                return _calibrate_on(server, scenario, ctx, on_phase)
            except ServerFailed:
                raise
            except Exception as e:  # the load generator's; but a server that died under it is the cause
                died = server.poll_failure(phase="calibration")
                if died is not None:
                    raise ServerFailed(died) from e
                raise CalibrationFailed(f"the load generator failed: {type(e).__name__}: {e}") from e
    except ServerFailed as e:
        raise CalibrationFailed(f"the vLLM-defaults server failed: {e.failure.summary()} "
                                f"(log: {e.failure.log_path or server.spec.log_path})") from e


def _calibrate_on(server, scenario: Scenario, ctx: LaunchContext, on_phase) -> CalibrationResult:
    t0 = time.monotonic()
    cal = scenario.calibration
    wl = scenario.workload
    model = str(ctx.model.path)
    rounds: list[dict[str, Any]] = []
    saturations: list[dict[str, float]] = []

    def watched(load):
        """`load(watch)`: a coroutine whose progress `watch` sees; a server that dies or hangs under
        it fails the calibration as it fails a trial."""
        watch = ProgressWatch(stall_bound_s())  # no unloaded TTFT yet: the floor
        return run_async(while_serving(server, load(watch), phase="calibration", watch=watch))

    for i in range(cal.repeats):
        tag = f" (round {i + 1}/{cal.repeats})" if cal.repeats > 1 else ""
        # Every round replays the same requests: without a reset, a later round's prompts hit
        # the prefix cache the earlier rounds filled (measured on mixed: the long class's
        # unloaded TTFT fell from 1,274 ms in round 1 to 89 ms in round 2, and the capacity
        # rose from 1.73 to 4.24 req/s).
        reset = watched(lambda watch: reset_prefix_cache(server.base_url, watch)) if i else None
        unloaded = _unloaded(server.base_url, model, ctx, wl, cal, warmup=i == 0, watched=watched,
                             on_phase=lambda text: on_phase(text + tag))
        on_phase(f"saturation throughput{tag}")
        spec = saturation_workload(wl, cal)
        saturation = watched(lambda watch: run_load(server.base_url, model, spec, tokenizer_path=ctx.model.path,
                                                    watch=watch)).flat_metrics()
        saturations.append(saturation)
        rounds.append({"capacity_rps": saturation["request_throughput"], "unloaded": unloaded,
                       "prefix_cache_reset": reset})
    return CalibrationResult.from_rounds(rounds, saturations, time.monotonic() - t0)


def _unloaded(url: str, model: str, ctx: LaunchContext, wl: WorkloadSpec, cal: Calibration, *, warmup: bool,
              watched, on_phase) -> dict[str, float]:
    """Each request class alone, one request at a time: its latency medians (and the overall
    medians, weighted by class share)."""
    unloaded: dict[str, float] = {}
    for i, cls in enumerate(wl.classes):
        on_phase(f"unloaded latency, class {cls.name}")
        spec = _closed(wl, 1, cal.unloaded_requests, classes=[cls.model_copy(update={"weight": 1.0})],
                       warmup=2 if warmup and i == 0 else 0)
        flat = watched(lambda watch: run_load(url, model, spec, tokenizer_path=ctx.model.path,
                                              watch=watch)).flat_metrics()
        for key, value in flat.items():
            if MetricName.parse(key).cls is None:
                unloaded[class_key(key, cls.name)] = value
                if len(wl.classes) == 1:
                    unloaded[key] = value
    if len(wl.classes) > 1:
        total = sum(c.weight for c in wl.classes)
        for fam in LATENCY_FAMILIES:
            unloaded[f"{fam}_median_ms"] = sum(
                unloaded[class_key(f"{fam}_median_ms", c.name)] * c.weight / total for c in wl.classes)
    return unloaded


def _goodput_reference(field: str) -> str:
    return f"{field.split('_')[0]}_median_ms"


def references(scenario: Scenario) -> set[str]:
    """The unloaded medians the scenario's relative bounds multiply."""
    refs = {unloaded_reference(s.metric) for s in scenario.slos if isinstance(s.bound, RelativeThreshold)}
    if scenario.goodput is not None:
        refs |= {_goodput_reference(f) for f in ("ttft_ms", "tpot_ms", "e2el_ms")
                 if isinstance(getattr(scenario.goodput, f), RelativeThreshold)}
    return refs


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def problems(scenario: Scenario, cal: CalibrationResult) -> list[str]:
    """Why `cal` cannot scale the scenario (empty: it can): a capacity that is not a positive
    number, or an unloaded median a relative bound needs that is missing, NaN or 0."""
    found = []
    if not _positive(cal.capacity_rps):
        sat = cal.saturation
        found.append(f"capacity {cal.capacity_rps} req/s (the saturation run completed "
                     f"{sat.get('completed', 0):.0f} requests, {sat.get('failed', 0):.0f} failed)")
    for ref in sorted(references(scenario)):
        if not _positive(cal.unloaded.get(ref)):
            found.append(f"unloaded {ref} is {cal.unloaded.get(ref)} (no request of that kind completed)")
    return found


def resolve_threshold(metric: str, value: Threshold, cal: CalibrationResult | None) -> float:
    if not isinstance(value, RelativeThreshold):
        return float(value)
    ref = unloaded_reference(metric)
    if cal is None or ref not in cal.unloaded:
        raise ValueError(f"{metric}: a relative bound needs the calibration's {ref}")
    return value.x_unloaded * cal.unloaded[ref]


def resolve(scenario: Scenario, cal: CalibrationResult | None) -> tuple[WorkloadSpec, list[SLOSpec], GoodputSLO | None]:
    """The scenario with every relative number turned into an absolute one for this machine."""
    workload = scenario.workload
    if workload.arrival.capacity_fraction is not None:
        workload = workload.model_copy(update={"arrival": workload.arrival.resolve(cal.capacity_rps)})
    slos = []
    for slo in scenario.slos:
        side = "max" if slo.max is not None else "min"
        slos.append(SLOSpec(metric=slo.metric, **{side: resolve_threshold(slo.metric, slo.bound, cal)}))
    goodput = None
    if scenario.goodput is not None:
        goodput = GoodputSLO(**{
            f: resolve_threshold(_goodput_reference(f), getattr(scenario.goodput, f), cal)
            for f in ("ttft_ms", "tpot_ms", "e2el_ms") if getattr(scenario.goodput, f) is not None})
    return workload, slos, goodput
