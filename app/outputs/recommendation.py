"""The recommendation in plain words, from the trial views: what to deploy (or why nothing),
how it compares with each baseline, objective by objective, and the tally of the search. The
top of the HTML report and of the dashboard's study note."""

from __future__ import annotations

from app.outputs.format import fmt_value
from app.outputs.read_model import LoadedStudy
from app.outputs.trial_views import CATEGORIES, FAILED, FEASIBLE, INFEASIBLE, TrialView


def gains(ls: LoadedStudy, chosen: TrialView, views: list[TrialView]) -> list[str]:
    """One sentence per baseline: how the chosen config compares, objective by objective."""
    sc = ls.scenario
    out = []
    by_baseline = {v.baseline: v for v in views if v.baseline}
    for name, base in by_baseline.items():
        if base.number == chosen.number:
            out.append(
                f"The chosen configuration is the {name} baseline itself: the search found "
                "nothing better under the selection rule."
            )
            continue
        if base.category == FAILED:
            out.append(
                f"Baseline {name} (trial {base.number}) never served: {base.failure}. "
                "Any working configuration beats it."
            )
            continue
        parts = []
        for obj in sc.objectives:
            new, old = chosen.metrics.get(obj.metric), base.metrics.get(obj.metric)
            if new is None or old is None:
                continue
            better = new > old if obj.direction == "maximize" else new < old
            rel = f"{(new - old) / abs(old) * 100:+.0f}%" if old else "n/a"
            parts.append(
                f"{obj.metric} {fmt_value(new)} vs {fmt_value(old)} ({rel}, "
                f"{'better' if better else 'worse' if new != old else 'same'})"
            )
        slo = "meets every SLO" if base.category == FEASIBLE else "violates " + ", ".join(base.violated)
        out.append(f"Against {name} (trial {base.number}, which {slo}): " + "; ".join(parts) + ".")
    return out


def _settings(v: TrialView) -> str:
    settings = v.params if not v.baseline else v.config
    return ", ".join(f"{k}={fmt_value(x)}" for k, x in settings.items()) or "vLLM's defaults"


def verdict(ls: LoadedStudy, views: list[TrialView]) -> tuple[TrialView | None, list[str]]:
    """(chosen trial, sentences for the top of the report): the confirmed verdict when the
    confirmation phase ran to its end, else the search's pick on single measurements."""
    counts = {c: sum(v.category == c for v in views) for c in CATEGORIES}
    chosen = next((v for v in views if v.chosen), None)
    tally = (
        f"{len(views)} trials in the search: {counts[FEASIBLE]} met every SLO, {counts[INFEASIBLE]} violated "
        f"at least one, {counts[FAILED]} never served."
    )
    if (v := ls.complete_verdict()) is not None:
        settings = [f"Settings of {chosen.label}: {_settings(chosen)}."] if chosen is not None else []
        left_out = [f"Note: {n}." for n in ls.describe(v).notes]  # e.g. a baseline that never served
        return chosen, [*ls.result_lines(), *settings, *left_out, tally]
    lines = [tally, *ls.result_lines()]
    if chosen is None:
        lines.insert(0, "No configuration met every SLO, so none is recommended.")
        measured = [v for v in views if v.category == INFEASIBLE]
        if measured:
            closest = min(measured, key=lambda v: sum(v.violated.values()))
            lines.append(
                f"Closest: {closest.label}, violating "
                + ", ".join(f"{k} by {v:.0%}" for k, v in closest.violated.items())
                + "."
            )
        return None, lines
    sc = ls.scenario
    objs = ", ".join(f"{o.metric} {fmt_value(chosen.metrics.get(o.metric))}" for o in sc.objectives)
    n_front = sum(v.on_front for v in views)
    lines.insert(
        0,
        f"Recommended: {chosen.label}, picked from the {n_front} "
        f"configuration{'s' if n_front != 1 else ''} on the feasible Pareto front as "
        f"{sc.selection.describe()}. "
        f"It measured {objs} and meets every SLO. Settings: {_settings(chosen)}.",
    )
    lines[1:1] = gains(ls, chosen, views)
    return chosen, lines
