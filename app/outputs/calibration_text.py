"""The calibration in words: each reference (the capacity, the idle server's medians) with its
spread over the calibration's rounds, how far it could move, and what of the study moves with it
(the target load, the relative SLO bounds)."""

from __future__ import annotations

from app.outputs.format import fmt_interval, fmt_percent, fmt_value
from objectives import statistics as st
from search.calibration import CalibrationResult
from search.scenario import RelativeThreshold, Scenario, goodput_reference, unloaded_reference


def _moves(spread: st.Interval) -> str:
    lo, hi = spread.low / spread.value - 1, spread.high / spread.value - 1
    return f"the reference could move {fmt_percent(lo, signed=True)} to {fmt_percent(hi, signed=True)}"


def _reference_line(
    what: str, spread: st.Interval | None, value: float, unit: str, rounds: int, cv: float, depends: str
) -> str:
    if spread is None:
        return f"calibration: {what} {fmt_value(value)} {unit} from one round (no spread measured); {depends}"
    return (
        f"calibration: {what} {fmt_interval(spread, unit=unit)} over {rounds} rounds (CV {fmt_percent(cv)}; "
        f"{_moves(spread)}); {depends}"
    )


def calibration_lines(scenario: Scenario, cal: CalibrationResult | None) -> list[str]:
    """The calibration's references with their spread over rounds, and what of the study moves
    with each: the target load (capacity) and the relative SLO bounds (unloaded medians)."""
    if cal is None:
        return []
    rounds = len(cal.rounds)
    fraction = scenario.workload.arrival.capacity_fraction
    depends = (
        f"the target load ({fmt_percent(fraction)} of it) moves with it"
        if fraction is not None
        else "no load of this scenario is relative to it"
    )
    lines = [_reference_line("capacity", cal.spread(), cal.capacity_rps, "req/s", rounds, cal.cv(), depends)]
    bounds: dict[str, list[str]] = {}
    for slo in scenario.slos:
        if (
            isinstance(slo.bound, RelativeThreshold)
            and (ref := unloaded_reference(slo.metric, slo.bound.of)) is not None
        ):
            bounds.setdefault(ref, []).append(f"{slo.metric} <= {fmt_value(slo.bound.x_unloaded)}x")
    if scenario.goodput is not None:
        for name in ("ttft_ms", "tpot_ms", "e2el_ms"):
            bound = getattr(scenario.goodput, name)
            if isinstance(bound, RelativeThreshold):
                bounds.setdefault(goodput_reference(name, bound.of), []).append(
                    f"goodput {name} <= {fmt_value(bound.x_unloaded)}x"
                )
    untimed = cal.untimed_classes()
    for ref, what in bounds.items():
        if (unloaded := cal.unloaded.get(ref)) is not None:
            depends = (
                f"the bound{'s' if len(what) > 1 else ''} {', '.join(what)} move{'' if len(what) > 1 else 's'} with it"
            )
            if ref == "tpot_median_ms" and untimed:
                depends += (
                    f"; read without the {', '.join(untimed)} class{'es' if len(untimed) > 1 else ''}, "
                    f"whose tokens reached the client in one read (a TPOT of 0 that times nothing)"
                )
            lines.append(
                _reference_line(f"unloaded {ref}", cal.spread(ref), unloaded, "ms", rounds, cal.cv(ref), depends)
            )
    return lines
