"""Measured once per study, on the vLLM-defaults baseline: what "relative" means on this machine.

* unloaded latency: each request class alone, one request at a time -> medians that
  `x_unloaded` thresholds multiply;
* saturation: the whole mix, closed loop at high concurrency -> the request rate that
  `capacity_fraction` loads are a fraction of.

Both are measured `repeats` times in alternating rounds on the one server, after
`warmup_rounds` unmeasured saturation loads; the reference is each metric's median over the
rounds, and the rounds' spread says how far it could move.
The result is stored with the study, so a resumed study replays exactly the same load.

This module is the pure part: the result, its checks (`problems`), and the scenario's relative
numbers resolved against it (`resolve`); the outputs read stored studies with it. Measuring
starts a server: `search.executor.calibration_run`, beside the real executor.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from loadgen import ArrivalSpec, GoodputSLO, MetricName, WorkloadSpec
from objectives import statistics as st
from objectives.scoring import SLOSpec
from search.scenario import Calibration, RelativeThreshold, Scenario, Threshold, goodput_reference, unloaded_reference

# A class's TPOT reference needs at least this share of its streams timed (`decode_timed`).
MIN_TIMED_SHARE = 0.5


@dataclass
class CalibrationResult:
    # Flat metrics, overall and per class (@name): medians over rounds; None where no round could
    # measure it (a TPOT whose streams the client could not time, see `decode_timed_share`).
    unloaded: dict[str, float | None]
    saturation: dict[str, float]  # the round whose capacity is the median
    capacity_rps: float  # median over rounds
    seconds: float
    # Each round's capacity and unloaded medians (what the spread is computed from).
    rounds: list[dict[str, Any]] = field(default_factory=list)
    # Unmeasured saturation loads before the first round (`Calibration.warmup_rounds`); 0 in a
    # calibration stored before there were any, whose first round met a cold server.
    warmup_rounds: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CalibrationResult:
        return cls(**d)

    @classmethod
    def from_rounds(
        cls, rounds: list[dict[str, Any]], saturations: list[dict[str, float]], seconds: float, warmup_rounds: int = 0
    ) -> CalibrationResult:
        """The reference from repeated rounds: each metric's median, and the saturation run of
        the round whose capacity is the median (an odd count: one of the rounds)."""
        capacities = [r["capacity_rps"] for r in rounds]
        median_round = sorted(range(len(rounds)), key=lambda i: capacities[i])[len(rounds) // 2]
        keys = rounds[0]["unloaded"].keys()
        return cls(
            unloaded={k: _median_of_known([r["unloaded"].get(k) for r in rounds]) for k in keys},
            saturation=saturations[median_round],
            capacity_rps=float(np.median(capacities)),
            seconds=seconds,
            rounds=rounds,
            warmup_rounds=warmup_rounds,
        )

    def slowest_unloaded_ttft_ms(self) -> float | None:
        """The largest unloaded TTFT median over the request classes (the stall bound's unit)."""
        values = [
            v
            for k, v in self.unloaded.items()
            if MetricName.parse(k).base == "ttft_median_ms" and v is not None and math.isfinite(v)
        ]
        return max(values) if values else None

    def spread(self, key: str = "capacity_rps") -> st.Interval | None:
        """The reference's median over rounds with its interval (None from a single round);
        `key`: capacity_rps or an unloaded metric."""
        values = [r.get(key, r.get("unloaded", {}).get(key)) for r in self.rounds]
        values = [v for v in values if v is not None]
        return st.median_interval(values) if len(values) > 1 else None

    def cv(self, key: str = "capacity_rps") -> float:
        values = [r.get(key, r.get("unloaded", {}).get(key)) for r in self.rounds]
        return st.coefficient_of_variation([v for v in values if v is not None])

    def untimed_classes(self) -> list[str]:
        """The request classes whose decode the client could not time in most rounds (their
        tokens arrived in one read), so the TPOT reference leaves them out."""
        shares: dict[str, list[float]] = {}
        for r in self.rounds:
            for name, share in (r.get("decode_timed_share") or {}).items():
                shares.setdefault(name, []).append(share)
        return [name for name, s in shares.items() if float(np.median(s)) < MIN_TIMED_SHARE]


def _median_of_known(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.median(known)) if known else None


def closed_workload(workload: WorkloadSpec, concurrency: int, requests: int, classes=None, warmup=0) -> WorkloadSpec:
    """`workload` as a closed loop of `concurrency` users sending `requests` (of `classes`, when given)."""
    return workload.model_copy(
        update={
            "arrival": ArrivalSpec(mode="closed", concurrency=concurrency),
            "num_requests": requests,
            "duration_s": None,
            "warmup_requests": warmup,
            **({"classes": classes} if classes is not None else {}),
        }
    )


def saturation_workload(workload: WorkloadSpec, settings: Calibration | None = None) -> WorkloadSpec:
    """The whole mix in a saturating closed loop: the capacity that `capacity_fraction` loads are
    a fraction of. The study's calibration and `autotune load`'s capacity probe both run this,
    with the scenario's `calibration:` settings (or their defaults)."""
    settings = settings or Calibration()
    return closed_workload(workload, settings.saturation_concurrency, settings.saturation_requests, warmup=4)


def references(scenario: Scenario) -> set[str]:
    """The unloaded medians the scenario's relative bounds multiply."""
    # A relative bound is only allowed where there is a reference (`search.scenario`'s SLO check).
    refs = {
        ref
        for s in scenario.slos
        if isinstance(s.bound, RelativeThreshold) and (ref := unloaded_reference(s.metric, s.bound.of)) is not None
    }
    if scenario.goodput is not None:
        refs |= {
            goodput_reference(f, bound.of)
            for f in ("ttft_ms", "tpot_ms", "e2el_ms")
            if isinstance(bound := getattr(scenario.goodput, f), RelativeThreshold)
        }
    return refs


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def problems(scenario: Scenario, cal: CalibrationResult) -> list[str]:
    """Why `cal` cannot scale the scenario (empty: it can): a capacity that is not a positive
    number, or an unloaded median a relative bound needs that is missing, NaN or 0."""
    found = []
    if not _positive(cal.capacity_rps):
        sat = cal.saturation
        found.append(
            f"capacity {cal.capacity_rps} req/s (the saturation run completed "
            f"{sat.get('completed', 0):.0f} requests, {sat.get('failed', 0):.0f} failed)"
        )
    for ref in sorted(references(scenario)):
        value = cal.unloaded.get(ref)
        if _positive(value):
            continue
        if MetricName.parse(ref).base in ("tpot_median_ms", "itl_median_ms") and (value == 0 or value is None):
            found.append(
                f"unloaded {ref} is {value}: the client could not time the decode (each "
                f"stream's tokens arrived in one read); give the {ref.split('_')[0].upper()} "
                f"bounds an absolute value in ms instead of x_unloaded"
            )
        else:
            found.append(f"unloaded {ref} is {value} (no request of that kind completed)")
    return found


def resolve_threshold(ref: str | None, value: Threshold, cal: CalibrationResult | None) -> float:
    """`value` in the metric's unit: a number as it is, a relative bound times the unloaded median
    `ref` (`unloaded_reference`, `goodput_reference`)."""
    if not isinstance(value, RelativeThreshold):
        return float(value)
    if ref is None or cal is None or (reference := cal.unloaded.get(ref)) is None:
        raise ValueError(f"a relative bound needs the calibration's {ref}")
    return value.x_unloaded * reference


def resolve(scenario: Scenario, cal: CalibrationResult | None) -> tuple[WorkloadSpec, list[SLOSpec], GoodputSLO | None]:
    """The scenario with every relative number turned into an absolute one for this machine."""
    workload = scenario.workload
    if workload.arrival.capacity_fraction is not None:
        if cal is None:
            raise ValueError("a load given as capacity_fraction needs the calibration's capacity")
        workload = workload.model_copy(update={"arrival": workload.arrival.resolve(cal.capacity_rps)})
    slos = []
    for slo in scenario.slos:
        side = "max" if slo.max is not None else "min"
        ref = unloaded_reference(slo.metric, slo.bound.of) if isinstance(slo.bound, RelativeThreshold) else None
        slos.append(SLOSpec(metric=slo.metric, **{side: resolve_threshold(ref, slo.bound, cal)}))
    goodput = None
    if scenario.goodput is not None:
        goodput = GoodputSLO(
            **{
                f: resolve_threshold(goodput_reference(f, getattr(bound, "of", None)), bound, cal)
                for f in ("ttft_ms", "tpot_ms", "e2el_ms")
                if (bound := getattr(scenario.goodput, f)) is not None
            }
        )
    return workload, slos, goodput
