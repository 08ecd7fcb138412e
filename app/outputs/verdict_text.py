"""The confirmed result in words: the sentences the report, the terminal summary, best.yaml's
header, the dashboard's study note and the live progress quote, each written here once (the
cost lines, where the study has a price, by `cost_text`), with what the verdict's numbers
rest on beside them (`verdict_basis`).

Pure: a `search.study.verdict.Verdict` (with its scenario and the confirmation runs' metrics) in,
lines out; the calibration's reference and how far it could move, from the stored calibration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from app.outputs.commands import confirm_command
from app.outputs.cost_text import CostText
from app.outputs.format import (
    call_words,
    comparison_line,
    fmt_difference,
    fmt_interval,
    fmt_percent,
    fmt_ratio,
    fmt_value,
    unit_of,
)
from app.outputs.trial_views import TrialView
from app.outputs.verdict_basis import (
    agreement_lines,
    bound_notes,
    noise_line,
    pooled_runs,
    screening_agreement,
    thin_percentiles,
)
from loadgen import SessionSpec
from objectives.capacity import CAPACITY_KEYS, SLO_CAPACITY_RPS
from objectives.statistics import Interval
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

SUSPECT = (
    "its load client fell behind its schedule, so the server got less load than planned and its "
    "numbers are suspect (the client waited for a CPU: other processes, or on a machine with few "
    "cores the server itself; rerun with less else running, or on more cores)"
)


def chosen_behind(label: str) -> str:
    """Said wherever a configuration measured with a lagging load client is the one to deploy."""
    return f"warning: {label} was chosen although {SUSPECT}; every alternative was measured so too"


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


def _names(metrics: Sequence[str]) -> str:
    return ", ".join(metrics)


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


def _calls(v: Verdict, candidate: CandidateResult, reference: CandidateResult) -> tuple[list[str], ...]:
    cmp = v.comparison(candidate.trial_number, reference.trial_number)
    if cmp is None:
        return [], [], []
    return cmp.with_call("win"), cmp.with_call("tie"), cmp.with_call("loss")


def _equals(v: Verdict, candidate: CandidateResult, reference: CandidateResult) -> list[str]:
    """`slo_capacity_rps equal within 5%` for each objective whose difference is smaller than what matters."""
    cmp = v.comparison(candidate.trial_number, reference.trial_number)
    if cmp is None:
        return []
    return [
        f"{m} {call_words('equal', cmp.thresholds.get(m), cmp.diffs[m].kind == 'relative')}"
        for m in cmp.with_call("equal")
    ]


def _single_runs(v: Verdict, candidate: CandidateResult, reference: CandidateResult) -> bool:
    """Whether every objective's difference rests on one run on some side."""
    cmp = v.comparison(candidate.trial_number, reference.trial_number)
    ns = [d.n for d in cmp.diffs.values()] if cmp is not None else []
    return 1 in ns and max(ns) == 1


def _against(v: Verdict, candidate: CandidateResult, baseline: CandidateResult) -> str:
    """How `candidate` fares against one baseline: `wins on X beyond the noise against B (ties on Y)`."""
    wins, ties, losses = _calls(v, candidate, baseline)
    name = baseline.baseline
    if wins:
        text, rest = f"wins on {_names(wins)} beyond the noise against {name}", []
        rest += [f"ties on {_names(ties)}"] if ties else []
        rest += [f"loses on {_names(losses)}"] if losses else []
    elif losses:
        text, rest = f"loses on {_names(losses)} against {name}", [f"ties on {_names(ties)}"] if ties else []
    elif _single_runs(v, candidate, baseline):
        # One run a side measures no run-to-run noise, so no difference is called either way
        # (`statistics.call`); "within the noise" would read as measured to be small.
        text, rest = f"one run each against {name}: no difference called beyond the noise", []
    else:
        text, rest = f"is within the noise of {name} on every objective", []
    rest += _equals(v, candidate, baseline)
    if not baseline.feasible:
        rest.append(f"{name} misses the SLOs")
    return text + (f" ({'; '.join(rest)})" if rest else "")


def _challenger(v: Verdict) -> CandidateResult | None:
    """The best feasible configuration that is not a baseline, by the rule on confirmed medians."""
    ranked = [(c.rank, c) for c in v.candidates if not c.baseline and c.feasible and c.rank is not None]
    return min(ranked, key=lambda pair: pair[0])[1] if ranked else None


def headline(v: Verdict, scenario: Scenario, study_name: str | None = None) -> str:
    """What to deploy and why, in one line; a warning with it when its numbers are suspect."""
    text = _headline(v, scenario, study_name)
    rec = v.recommended
    if rec is not None and rec.behind and v.outcome != Outcome.INCOMPLETE:
        text += f"; {chosen_behind(rec.label)}"
    return text


def _headline(v: Verdict, scenario: Scenario, study_name: str | None) -> str:
    if v.outcome == Outcome.INCOMPLETE:
        return (
            f"confirmation incomplete: {v.runs_done} of {v.runs_planned} runs; run "
            f"{confirm_command(scenario, study_name)} to finish"
        )
    rec = v.recommended
    if v.outcome == Outcome.NONE_FEASIBLE or rec is None:  # `decide` recommends one in every other outcome
        return "no configuration is recommended: none met the SLOs on its confirmed medians; " + _closest(v)
    if v.outcome == Outcome.RECOMMEND:
        if not v.baselines:
            return (
                f"deploy {rec.label}: first by the rule on its confirmed medians; no baseline was "
                "confirmed to compare it with"
            )
        return f"deploy {rec.label}: " + "; ".join(_against(v, rec, b) for b in v.baselines)
    challenger = _challenger(v)
    if challenger is None:
        return f"keep {rec.label}: no other configuration met the SLOs on its confirmed medians"
    wins, ties, losses = _calls(v, challenger, rec)
    if _single_runs(v, challenger, rec):
        # Nothing is called on one run a side: say what would call it, not that it is a tie.
        runs = scenario.confirmation.runs if scenario.confirmation.runs > 1 else 3
        return (
            f"keep {rec.label}: with one run each no difference is called beyond the noise; "
            f"{confirm_command(scenario, study_name, runs)} adds the runs that can ({challenger.label} "
            f"not called on {_names(ties)})"
        )
    if wins and losses:
        why = f"{challenger.label} wins on {_names(wins)} but loses on {_names(losses)}"
    elif wins:
        why = f"it ranks first by the rule on the confirmed medians; {challenger.label} wins only on {_names(wins)}"
    else:
        said = [f"loses on {_names(losses)}"] if losses else []
        said += [f"ties on {_names(ties)}"] if ties else []
        said += _equals(v, challenger, rec)
        why = f"nothing beats it beyond the noise ({challenger.label} {', '.join(said)})"
    return f"keep {rec.label}: {why}"


BASELINE_NAMES = {"vllm_defaults": "vLLM defaults"}


def _latency_objective(scenario: Scenario) -> str | None:
    """The primary latency objective: the first objective measured in ms."""
    return next((m for m in scenario.objective_names if unit_of(m) == "ms"), None)


def _capacity_objective(scenario: Scenario) -> str | None:
    names = measured_metrics(scenario)
    return SLO_CAPACITY_RPS if SLO_CAPACITY_RPS in names else next((m for m in names if m in CAPACITY_KEYS), None)


def _gain_part(
    v: Verdict,
    metric: str,
    candidate: CandidateResult,
    reference: CandidateResult,
    what: str,
    as_ratio: bool,
    also: str = "",
) -> str:
    unit = unit_of(metric)
    cmp = v.comparison(candidate.trial_number, reference.trial_number)
    diff = cmp.diffs.get(metric) if cmp is not None else None
    name = _reference_name(reference)
    name = BASELINE_NAMES.get(name, name)
    ours, theirs = candidate.metrics[metric], reference.metrics[metric]
    if as_ratio and theirs.value == 0 and theirs.low == 0 and theirs.high > 0 and ours.low > 0:
        # The reference met the SLO at no rate tried (a baseline's search stopped once beaten, or
        # one that missed down to the floor): its capacity is only bounded above, and so the
        # ratio only below.
        least = ours.low / theirs.high
        return (
            f"{what}: {fmt_interval(ours, unit=unit)}{also} vs {name} below {fmt_value(theirs.high)}: "
            f"at least {least:.1f}x"
        )
    text = f"{what}: {fmt_interval(ours, unit=unit)}{also} vs {name} {fmt_interval(theirs)}"
    if diff is not None:
        text += ": " + ((fmt_ratio(diff) if as_ratio else None) or fmt_difference(diff, unit))
    return text


def gain_headline(v: Verdict, scenario: Scenario) -> str | None:
    """The gain a user came for, in one line, the same in every output: `capacity under the SLO:
    2.11 req/s [2.03, 2.31] vs vLLM defaults 0.7 [0.6, 0.8]: 3.0x [2.6, 3.6]; ttft_p95_ms@short at the
    target load: 785 ms [766, 935] vs vLLM defaults 1,134 [1,128, 1,230]: -31% [-38, -17]`. The
    configuration recommended (or the best challenger of a kept baseline) against the reference
    baseline (the best feasible one, else the first); None without both."""
    if v.outcome == Outcome.INCOMPLETE:
        return None
    candidate = v.recommended if v.recommended is not None and not v.recommended.baseline else _challenger(v)
    if candidate is None:
        candidate = next((c for c in v.candidates if not c.baseline), None)
    reference = v.reference or next(iter(v.baselines), None)
    if candidate is None or reference is None:
        return None
    parts = []
    if (capacity := _capacity_objective(scenario)) is not None:
        sessions = scenario.workload.sessions
        also = (
            f" ({_in_sessions(candidate.metrics[capacity], sessions)})"
            if capacity == SLO_CAPACITY_RPS and sessions is not None
            else ""
        )
        parts.append(_gain_part(v, capacity, candidate, reference, "capacity under the SLO", True, also))
    if (latency := _latency_objective(scenario)) is not None:
        parts.append(_gain_part(v, latency, candidate, reference, f"{latency} at the target load", False))
    return f"{candidate.label}: " + "; ".join(parts) if parts else None


def _in_sessions(rps: Interval, sessions: SessionSpec) -> str:
    """A capacity in requests/s as sessions/s: a session workload's capacity is counted in turns."""
    turns = sessions.mean_turns()
    scaled = replace(rps, value=rps.value / turns, low=rps.low / turns, high=rps.high / turns)
    return f"{fmt_interval(scaled, unit='sessions/s')} of {turns:.3g} turns"


def _closest(v: Verdict) -> str:
    c = v.closest
    if c is None:
        return "no candidate was measured"
    worst = c.worst_slo
    if c.failures and len(c.failures) == c.rounds:
        return "closest: none, every candidate failed to serve"
    text = f"closest: {c.label}"
    if worst is not None:
        text += f", {worst[0]} missed by {fmt_percent(worst[1])}"
    if c.failures:
        text += f"; {len(c.failures)} of {c.rounds} runs failed"
    return text


def ties_sentence(v: Verdict, scenario: Scenario) -> str | None:
    if not v.ties or v.top is None:
        return None
    labels = [c.label for c in v.ties]
    names = labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]
    verb = "is" if len(labels) == 1 else "are"
    text = (
        f"{names} {verb} within the noise of {v.top.label} on every objective; {v.top.label} picked by "
        f"the tie-break: {scenario.selection.describe()}, on the confirmed medians"
    )
    if v.recommended is not None and v.recommended.trial_number != v.top.trial_number:
        text += f", but it does not beat {v.recommended.label} beyond the noise"
    return text


def _reference_name(c: CandidateResult) -> str:
    """How a comparison names its reference: a baseline by its name (a trial by its label)."""
    return c.baseline or c.label


def comparison_block(v: Verdict, candidate: CandidateResult, baseline: CandidateResult, scenario: Scenario) -> Block:
    cmp = v.comparison(candidate.trial_number, baseline.trial_number)
    assert cmp is not None  # `decide` compares each candidate that is not a baseline with every baseline
    title = f"{candidate.label} against {baseline.label}" + ("" if baseline.feasible else " (misses the SLOs)")
    lines = [
        comparison_line(
            m,
            candidate.metrics[m],
            _reference_name(baseline),
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
        challenger = _challenger(v)
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
