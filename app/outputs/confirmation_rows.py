"""The confirmation table as data: one row per confirmed candidate (runs that served, each
objective's median with its interval, the SLOs on the confirmed medians, its call against each
baseline). Built once here; the terminal summary and the HTML report each draw it."""

from __future__ import annotations

from dataclasses import dataclass

from app.outputs import verdict_text
from app.outputs.format import fmt_bracket, fmt_interval, unit_of
from app.outputs.read_model import LoadedStudy
from objectives.capacity import SLO_CAPACITY_RPS
from objectives.scoring import Direction
from objectives.statistics import Call
from search.study.verdict import CandidateResult


@dataclass(frozen=True)
class CandidateRow:
    trial_number: int
    label: str
    baseline: bool  # a baseline is compared with no other
    deployed: bool
    runs_ok: str  # "runs that served/runs planned"
    medians: list[tuple[str, float]]  # per objective: median [95% interval] as written, and the median
    feasible: bool
    slo: str  # the SLOs on its confirmed medians, in words
    calls: list[dict[str, Call] | None]  # per baseline: objective -> win/loss/tie (None: no comparison)


@dataclass(frozen=True)
class ConfirmationRows:
    runs: int  # planned per candidate
    runs_done: int
    runs_planned: int  # over every candidate
    objectives: list[str]
    directions: list[Direction]
    baselines: list[str]  # the baselines' names, in the order of each row's `calls`
    rows: list[CandidateRow]
    deployed: int | None  # the trial to deploy (None: none)


def confirmation_rows(ls: LoadedStudy) -> ConfirmationRows | None:
    """The confirmation table of the study (None: no confirmation phase started)."""
    v, plan = ls.verdict, ls.record.confirmation
    if v is None or plan is None:  # `stored_verdict` reads a verdict only from a stored plan
        return None
    names = ls.scenario.objective_names
    runs = plan["runs"]
    deployed = ls.deployment().trial_number
    rows = []
    for c in v.candidates:
        calls: list[dict[str, Call] | None] = []
        for b in v.baselines:
            cmp = None if c.baseline else v.comparison(c.trial_number, b.trial_number)
            calls.append(None if cmp is None else dict(cmp.calls))
        rows.append(
            CandidateRow(
                trial_number=c.trial_number,
                label=c.label,
                baseline=bool(c.baseline),
                deployed=c.trial_number == deployed,
                runs_ok=f"{c.rounds - len(c.failures)}/{runs}",
                medians=[(_median_text(c, n), c.metrics[n].value) for n in names],
                feasible=c.feasible,
                slo=verdict_text.slo_margin(c),
                calls=calls,
            )
        )
    return ConfirmationRows(
        runs=runs,
        runs_done=v.runs_done,
        runs_planned=v.runs_planned,
        objectives=list(names),
        directions=ls.scenario.directions,
        baselines=[b.baseline for b in v.baselines if b.baseline],
        rows=rows,
        deployed=deployed,
    )


def _median_text(c: CandidateResult, name: str) -> str:
    """A median [95% interval] as written; a capacity with each run's bracket after it."""
    text = fmt_interval(c.metrics[name], unit=unit_of(name))
    if name == SLO_CAPACITY_RPS and c.brackets.get(name):
        text += "; runs " + " ".join(fmt_bracket(lo, hi) for est, lo, hi in c.brackets[name] if est == est)
    return text
