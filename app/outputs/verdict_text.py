"""The confirmed result in words: every line of the verdict the report, the terminal summary,
best.yaml's header, the dashboard's study note and the live progress quote, written here once:
the headline (`verdict_headline`), the gain (`gain_text`), the cost lines, where the study has a
price (`cost_text`), every candidate against every baseline, the candidates that missed the
SLOs, with what the verdict's numbers rest on beside them (`verdict_basis`).

Pure: a `search.study.verdict.Verdict` (with its scenario and the confirmation runs' metrics) in,
lines out; the calibration's reference and how far it could move, from the stored calibration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from app.outputs.commands import confirm_command
from app.outputs.cost_text import CostText
from app.outputs.format import comparison_line, fmt_interval, fmt_percent, unit_of
from app.outputs.gain_text import gain_headline, reference_name
from app.outputs.trial_views import TrialView
from app.outputs.verdict_basis import (
    agreement_lines,
    bound_notes,
    noise_line,
    pooled_runs,
    screening_agreement,
    thin_percentiles,
)
from app.outputs.verdict_headline import SUSPECT, best_challenger, headline, ties_sentence
from search.scenario import Scenario, deployment_differences
from search.study.verdict import (
    PASS_FAIL,
    CandidateResult,
    Outcome,
    RunView,
    Verdict,
    measured_metrics,
)
from storage.tables import TrialStatus


def behind_lines(v: Verdict) -> list[str]:
    """One line per candidate with a confirmation run whose load client fell behind."""
    lines = []
    for c in v.candidates:
        if c.behind:
            left_out = "; not considered for the recommendation" if c.feasible and c.rank is None else ""
            lines.append(f"{c.label}: in round {', '.join(map(str, c.behind))} {SUSPECT}{left_out}")
    return lines


def unconfirmed(scenario: Scenario, study_name: str | None = None) -> str:
    """What single measurements are worth, said wherever they are quoted without a verdict."""
    return (
        "single, unconfirmed measurements: no confirmation phase ran (--confirm-runs 0, no configuration "
        "near the SLOs to confirm, or the study predates it); "
        f"{confirm_command(scenario, study_name)} re-measures the front's best and the baselines"
    )


@dataclass
class Block:
    """A titled group of lines: one candidate against one baseline, objective by objective."""

    title: str
    lines: list[str]


@dataclass
class VerdictText:
    headline: str
    ties: str | None = None
    gain: str | None = None  # capacity under the SLO and the primary latency, against the reference
    cost: str | None = None  # with a price: what the deployed configuration costs, against the defaults
    key: list[Block] = field(default_factory=list)  # the comparisons behind the headline
    comparisons: list[Block] = field(default_factory=list)  # every candidate against every baseline
    infeasible: list[str] = field(default_factory=list)  # candidates that missed the SLOs, worst margin
    costs: Block | None = None  # with a price: every candidate's cost at its capacity under the SLO
    noise: str | None = None
    warnings: list[str] = field(default_factory=list)  # percentiles too few requests decide
    notes: list[str] = field(default_factory=list)  # the phase's: candidates left out, and why
    agreement: list[str] = field(default_factory=list)  # the screening's calls against the confirmation's

    def summary_lines(self, indent: str = "  ") -> list[str]:
        """The headline, the ties and the comparisons that decided: the top of every output."""
        return [
            self.headline,
            *([self.gain] if self.gain else []),
            *([self.cost] if self.cost else []),
            *([self.ties] if self.ties else []),
            *_flat(self.key, indent),
        ]

    def lines(self, indent: str = "  ") -> list[str]:
        """Everything: headline, ties, every comparison, infeasible candidates, noise, warnings."""
        return [
            self.headline,
            *([self.gain] if self.gain else []),
            *([self.cost] if self.cost else []),
            *([self.ties] if self.ties else []),
            *_flat(self.comparisons, indent),
            *self.infeasible,
            *_flat([self.costs] if self.costs else [], indent),
            *([self.noise] if self.noise else []),
            *(f"warning: {w}" for w in self.warnings),
            *(f"note: {n}" for n in self.notes),
            *self.agreement,
        ]


def _flat(blocks: Sequence[Block], indent: str) -> list[str]:
    return [line for b in blocks for line in [f"{b.title}:", *(indent + x for x in b.lines)]]


def slo_margin(c: CandidateResult) -> str:
    """`met (closest: ttft_p95_ms<=2000, 40% headroom)` or `misses ttft_p95_ms<=2000 by 25%`."""
    if c.failures:
        return f"{len(c.failures)} of {c.rounds} runs failed"
    worst = c.worst_slo
    if worst is None:
        return "no SLO scored"
    key, margin = worst
    if margin > 0:
        return f"misses {key} by {fmt_percent(margin)}"
    return f"met (closest: {key}, {fmt_percent(-margin)} headroom)" if key not in PASS_FAIL else "met"


def comparison_block(v: Verdict, candidate: CandidateResult, baseline: CandidateResult, scenario: Scenario) -> Block:
    cmp = v.comparison(candidate.trial_number, baseline.trial_number)
    assert cmp is not None  # `decide` compares each candidate that is not a baseline with every baseline
    title = f"{candidate.label} against {baseline.label}" + ("" if baseline.feasible else " (misses the SLOs)")
    lines = [
        comparison_line(
            m,
            candidate.metrics[m],
            reference_name(baseline),
            baseline.metrics[m],
            cmp.diffs[m],
            cmp.calls[m],
            cmp.thresholds.get(m),
        )
        for m in scenario.objective_names
    ]
    note = deployment_note(scenario, baseline.baseline)
    return Block(title, lines + ([note] if note else []))


def deployment_note(scenario: Scenario, baseline: str | None) -> str | None:
    """Where a baseline does not run on the scenario's fixed deployment facts (it set its own):
    `not like for like: seed_recommended runs max_model_len 8192, every trial 4096 (server.fixed)`."""
    if baseline is None or baseline not in scenario.baselines:
        return None
    shared = scenario.server.deployment()
    own = scenario.baselines[baseline]
    differ = {k: v for k, v in deployment_differences(own, shared).items() if k in own and k in shared}
    if not differ:
        return None
    said = ", ".join(f"{k} {mine}, every trial {held}" for k, (mine, held) in differ.items())
    return f"not like for like: {baseline} runs {said} (server.fixed)"


def medians_block(c: CandidateResult, scenario: Scenario) -> Block:
    """A candidate's confirmed medians alone (no baseline to compare with)."""
    return Block(c.label, [f"{m} {fmt_interval(c.metrics[m], unit=unit_of(m))}" for m in scenario.objective_names])


def _key_blocks(v: Verdict, scenario: Scenario) -> list[Block]:
    rec = v.recommended
    if rec is None:  # nothing decided: incomplete, or none feasible
        return []
    if v.outcome == Outcome.RECOMMEND:
        return (
            [comparison_block(v, rec, b, scenario) for b in v.baselines]
            if v.baselines
            else [medians_block(rec, scenario)]
        )
    if v.outcome == Outcome.KEEP_BASELINE:
        challenger = best_challenger(v)
        if challenger is not None:
            return [comparison_block(v, challenger, rec, scenario)]
    return []


def describe(
    v: Verdict,
    scenario: Scenario,
    runs: Sequence[RunView] = (),
    notes: Sequence[str] = (),
    views: Sequence[TrialView] = (),
    cost: CostText | None = None,
    study_name: str | None = None,
) -> VerdictText:
    """Every line of the verdict. `runs`: the confirmation runs (those that served, for the
    thin-percentile warnings; all, for the confirmed capacity where no objective holds it,
    `screening_agreement`); `notes`: the phase's own; `views`: the study's trials, for the
    screening's agreement with the confirmation; `cost`: the cost lines, where the study has a
    price (`cost_text`)."""
    served = [r.metrics for r in runs if r.status == TrialStatus.OK]
    blocks = []
    for c in v.candidates:
        if c.baseline:
            continue
        blocks += (
            [comparison_block(v, c, b, scenario) for b in v.baselines] if v.baselines else [medians_block(c, scenario)]
        )
    infeasible = [
        f"{c.label}: {slo_margin(c)} on its confirmed medians"
        if not c.failures
        else f"{c.label}: {slo_margin(c)} ({'; '.join(c.failures)})"
        for c in v.candidates
        if not c.feasible
    ]
    return VerdictText(
        headline=headline(v, scenario, study_name),
        ties=ties_sentence(v, scenario),
        gain=gain_headline(v, scenario),
        cost=cost.headline if cost is not None else None,
        key=_key_blocks(v, scenario),
        comparisons=blocks,
        infeasible=infeasible,
        costs=Block(cost.title, cost.lines) if cost is not None and cost.lines else None,
        noise=noise_line(v),
        warnings=behind_lines(v) + thin_percentiles(measured_metrics(scenario), served, pooled_runs(v)),
        notes=list(notes) + bound_notes(v, scenario),
        agreement=agreement_lines(screening_agreement(v, views, runs)) if views else [],
    )
