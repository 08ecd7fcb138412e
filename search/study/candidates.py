"""Who the confirmation re-measures: the first feasible configurations of the front by the
selection rule (one per set of flags), else the closest near misses, then every baseline that
served; and where each run of one looks for its capacity first (`rerun_hint`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from search import pareto, trial_results
from search.prepare import Prepared
from storage.tables import ConfirmationRun, TrialRecord, TrialStatus

# With nothing sampled feasible, sampled configs that missed an SLO by at most this fraction of its
# bound are confirmed: one screen's short-request TTFT tail can move by more than that between
# the search and the confirmation of one config (docs/results.md, "Confirmation").
NEAR_MISS = 0.25


@dataclass(frozen=True)
class Candidate:
    trial_number: int
    baseline: str | None
    config: dict[str, Any]  # canonical values, as the trial applied them
    params: dict[str, Any]
    capacity_hint: tuple[float, ...] = ()  # where the search's trial bracketed its capacity (`rerun_hint`)

    @property
    def label(self) -> str:
        return f"{self.baseline} (trial {self.trial_number})" if self.baseline else f"trial {self.trial_number}"


def candidates(
    study: optuna.Study, rows: dict[int, TrialRecord], prep: Prepared, front_size: int
) -> tuple[list[Candidate], list[str]]:
    """The first `front_size` feasible configurations by the selection rule (front members
    first, baselines aside, one trial per set of flags), then each baseline that served; and
    notes on baselines left out. A baseline that dominates every sampled trial leaves the front
    to itself: the best of the feasible rest are then confirmed against it."""
    sc = prep.scenario
    on_front = {t.number for t in pareto.front(study)}
    members = [t for t in pareto.finished(study) if pareto.feasible(t) and not rows[t.number].baseline]
    order = pareto.rank([t.values for t in members], sc.directions, sc.objective_names, sc.selection)
    order.sort(key=lambda i: members[i].number not in on_front)  # stable: the rule's order within each
    picked, seen = _first_distinct([rows[members[i].number] for i in order], front_size)
    notes = []
    if not picked:
        picked, seen, note = _near_misses(study, rows, front_size)
        notes += [note] if note else []
    for name in prep.baselines:
        row = next((r for r in rows.values() if r.baseline == name and r.status != TrialStatus.DUPLICATE), None)
        if row is None:
            notes.append(f"baseline {name}: not measured in the search; not confirmed")
        elif row.status != TrialStatus.OK:
            notes.append(
                f"baseline {name} (trial {row.trial_number}) failed in the search ({row.failure_class}); not confirmed"
            )
        elif row.fingerprint in seen:
            notes.append(f"baseline {name}: same flags as a front member; confirmed once")
        else:
            seen.add(row.fingerprint)
            picked.append(Candidate(row.trial_number, name, row.config, row.params, _bracket(row)))
    return picked, notes


def _first_distinct(ranked: Sequence[TrialRecord], n: int) -> tuple[list[Candidate], set[str]]:
    """The first `n` of `ranked` as candidates, one per set of flags, and the flags seen."""
    picked: list[Candidate] = []
    seen: set[str] = set()
    for row in ranked:
        if row.fingerprint in seen:
            continue
        seen.add(row.fingerprint)
        picked.append(Candidate(row.trial_number, None, row.config, row.params, _bracket(row)))
        if len(picked) == n:
            break
    return picked, seen


def _near_misses(
    study: optuna.Study, rows: dict[int, TrialRecord], front_size: int
) -> tuple[list[Candidate], set[str], str | None]:
    """With no sampled configuration feasible in the search, the closest ones whose worst SLO miss
    is within NEAR_MISS of its bound: a miss the search's single screen does not settle (the same
    configs can miss by 1% in one study and pass with room in the next; docs/results.md,
    "Confirmation"). Confirmed, each gets its capacity searched
    below the target, so the verdict still says how much load each config carries."""
    near = sorted(
        (t for t in pareto.finished(study) if not rows[t.number].baseline and 0 < pareto.slo_miss(t) <= NEAR_MISS),
        key=pareto.slo_miss,
    )
    picked, seen = _first_distinct([rows[t.number] for t in near], front_size)
    if not picked:
        return [], seen, None
    closest = ", ".join(
        f"trial {c.trial_number} (missed by {pareto.slo_miss(study.trials[c.trial_number]):.1%})" for c in picked
    )
    return (
        picked,
        seen,
        (
            f"no sampled configuration met the SLOs in the search; confirming the closest, "
            f"within {NEAR_MISS:.0%} of a bound (a miss one screen does not settle): {closest}"
        ),
    )


def _bracket(row: TrialRecord | ConfirmationRun) -> tuple[float, ...]:
    """The rates the row's capacity search ended between: where a full search of the same
    flags looks first (each rate measured again)."""
    cap = trial_results.capacity_of(row)
    return tuple(float(r) for r in (cap.low, cap.high) if r) if cap is not None else ()


def rerun_hint(cand: Candidate, earlier: Sequence[ConfirmationRun]) -> tuple[float, ...]:
    """Where a confirmation run of `cand` looks for its capacity first: the bracket of its latest
    run that found one (the full measurement, on a fresh server), else its search trial's (a
    screen). Unhinted, a config that misses at the target walks down the same stages to the same
    bracket in every run; hinted, a run that lands in the same bracket measures 2 (the target,
    then the bracket's low end; docs/results.md, "Confirmation"). Only where to look: every rate
    is measured again."""
    for run in sorted(earlier, key=lambda r: r.sequence, reverse=True):
        if run.trial_number == cand.trial_number and run.status == TrialStatus.OK.value and (found := _bracket(run)):
            return found
    return cand.capacity_hint
