"""Where a baseline's capacity search stops in a confirmation run: once it misses at a rate every
other candidate carries beyond the capacity's practical threshold, the comparison is decided
whatever the rest of its search would find (`confirmation.baseline_search: until_decided`, the
default; `full` searches on). The rule (`beaten_at`), its threshold, the plan's shares of runs it
stops, and what the phase says of it."""

from __future__ import annotations

from collections.abc import Sequence

from objectives.capacity import SLO_CAPACITY_RPS
from search import trial_results
from search.scenario import Scenario
from search.study.candidates import Candidate
from storage.tables import ConfirmationRun, TrialRecord, TrialStatus


def beaten_at(
    cand: Candidate, cands: Sequence[Candidate], runs: Sequence[TrialRecord | ConfirmationRun], threshold: float
) -> float | None:
    """Where a baseline's capacity search may stop (`objectives.stages.search_step`): a rate every
    other candidate carries beyond the practical `threshold`, read from `runs` (the confirmation's
    stored runs; before the phase, the candidates' search trials). A miss at or below it decides
    the comparison with each of them whatever the rest of the search would find. The least of the
    candidates' lowest met rates: None for a configuration that is not a baseline, or while one
    of them has no run that found a rate it meets (its comparison is not decided). A candidate
    with a failed run is left out: it loses its feasibility, and no comparison with it decides."""
    if cand.baseline is None:
        return None
    lows = []
    for other in (c for c in cands if c.baseline is None):
        own = [r for r in runs if r.trial_number == other.trial_number]
        if any(r.status != TrialStatus.OK.value for r in own):
            continue
        found = [c.low for c in map(trial_results.capacity_of, own) if c is not None and c.low]
        if not found:
            return None
        lows.append(min(found))
    return min(lows) / (1.0 + threshold) if lows else None


def baseline_threshold(sc: Scenario) -> float | None:
    """The practical threshold of a capacity, where a baseline's search stops once its comparison
    is decided (`confirmation.baseline_search: until_decided`); None where it searches in full."""
    if sc.confirmation.baseline_search != "until_decided":
        return None
    return sc.verdict.practical.threshold(SLO_CAPACITY_RPS)


def run_shares(sc: Scenario, baselines: int) -> tuple[float, float]:
    """The shares of the planned confirmation runs that are a front member's and a baseline's whose
    search stops once the others beat it (`search.study.cost.study_cost`); a baseline searched in
    full is planned as any candidate not yet searched."""
    n = sc.confirmation.front + baselines
    if not n:
        return 0.0, 0.0
    stopped = baselines / n if baseline_threshold(sc) is not None else 0.0
    return sc.confirmation.front / n, stopped


def baseline_search_note(sc: Scenario, cands: Sequence[Candidate]) -> str | None:
    """What the phase says of its baselines' capacity searches (None: no baseline to say it of)."""
    if not any(c.baseline for c in cands) or not any(c.baseline is None for c in cands):
        return None
    threshold = baseline_threshold(sc)
    if threshold is None:
        return "each baseline's capacity is searched in full (confirmation.baseline_search: full)"
    return (
        f"a baseline's capacity search stops once it misses at a rate every other candidate carries "
        f"{threshold:.0%} more than (the comparison is then decided; its capacity is shown below that rate); "
        "confirmation.baseline_search: full searches it on"
    )
