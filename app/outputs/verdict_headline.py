"""The verdict's headline: what to deploy and why, in one line, the same in every output (the
report, the terminal summary, best.yaml's header, the dashboard's study note and the live
progress quote), with the ties the tie-break settled and, where nothing met the SLOs, the
configuration that came closest.

Its own room because each of them quotes this one sentence alone, before any comparison block
(`verdict_text` holds the rest of the verdict in words). Pure: a
`search.study.verdict.Verdict` and its scenario in, a sentence out.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.outputs.commands import confirm_command
from app.outputs.format import call_words, fmt_percent
from search.scenario import Scenario
from search.study.verdict import CandidateResult, Outcome, Verdict

SUSPECT = (
    "its load client fell behind its schedule, so the server got less load than planned and its "
    "numbers are suspect (the client waited for a CPU: other processes, or on a machine with few "
    "cores the server itself; rerun with less else running, or on more cores)"
)


def chosen_behind(label: str) -> str:
    """Said wherever a configuration measured with a lagging load client is the one to deploy."""
    return f"warning: {label} was chosen although {SUSPECT}; every alternative was measured so too"


def _names(metrics: Sequence[str]) -> str:
    return ", ".join(metrics)


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


def best_challenger(v: Verdict) -> CandidateResult | None:
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
    challenger = best_challenger(v)
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
