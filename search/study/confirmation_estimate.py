"""What the confirmation's runs will take, priced from the stored search: a candidate's run from
its search trial (the screened target stage swapped for the full one), at least the study's plan
of a run for where that trial left its capacity (`search.study.cost`); a round re-planned once the
baselines are screened; and before any trial, the most a phase can take."""

from __future__ import annotations

import math
from collections.abc import Sequence

from objectives.stages import TARGET
from search import trial_results
from search.executor import Measurement
from search.study.baseline_stop import beaten_at
from search.study.candidates import Candidate
from search.study.cost import BETWEEN_STAGES_S, CONFIRM_STAGES, ConfirmationRunCost
from storage.tables import TrialRecord

# A server start and stop on this CPU (benchmarks/bench_startup.py: 34-45 s eager), for the estimate
# made before the search has timed any trial.
START_STOP_ESTIMATE_S = 45.0


def run_estimates(
    cands: Sequence[Candidate],
    rows: dict[int, TrialRecord],
    full: Measurement,
    screened: Measurement,
    run_cost: ConfirmationRunCost | None = None,
    threshold: float | None = None,
) -> dict[int, float] | None:
    """One run of each candidate (by trial number), from its search trial's time
    (`searched_run_s`), and at least the study's plan of a run for where that trial left its
    capacity (`run_cost`, `search.study.cost`): a candidate cut short at the target in the search
    searches its capacity down in its confirmation runs, at lower rates, in stages that run on near
    its bound, unless it is a baseline that stops where the others beat it (`threshold`: the
    capacity's practical threshold, under `baseline_search: until_decided`; `beaten_at` read from
    the search's trials). None where a trial's time was not stored."""
    searched = [rows[c.trial_number] for c in cands]
    out: dict[int, float] = {}
    for c in cands:
        row = rows[c.trial_number]
        stop = beaten_at(c, cands, searched, threshold) if threshold is not None else None
        took = searched_run_s(row, full, screened, run_cost, searches_on=stop is None)
        if took is None:
            return None
        out[c.trial_number] = max(took, _planned_run_s(row, run_cost, stop))
    return out


def searched_run_s(
    row: TrialRecord,
    full: Measurement,
    screened: Measurement,
    run_cost: ConfirmationRunCost | None,
    searches_on: bool = False,
) -> float | None:
    """A confirmation run of a searched configuration, from its search trial's time: the trial with
    its target stage as it ran (cut short by an early abort, or run on undecided) swapped for the
    confirmation's, which sends its planned requests in full, then drains. A run looks first where
    the search bracketed the capacity; `searches_on` (a candidate whose search does not stop once
    beaten) adds the stages a confirmation's larger budget runs beyond its screen's
    (`stages_beyond_screen_s`). Where the trial stored no stages or the measurement has none, its
    load is scaled by the two measurements' target stages instead. None: the trial's time was not
    stored."""
    t = trial_results.timings_of(row)
    if t.total_s is None:
        return None
    screened_target, full_target = trial_results.target_elapsed_s(row), full.target_sending_s()
    if screened_target is not None and full_target is not None:
        took = t.total_s - screened_target + full_target + (run_cost.drain_s if run_cost is not None else 0.0)
        return took + (stages_beyond_screen_s(row, full, screened) if searches_on else 0.0)
    full_s, short_s = full.target_planned_s(), screened.target_planned_s()
    scale = full_s / short_s if full_s and short_s else 1.0
    load = t.load_s or 0.0
    return t.total_s - load + load * scale


def stages_beyond_screen_s(row: TrialRecord, full: Measurement, screened: Measurement) -> float:
    """The capacity stages a confirmation run adds to its screen's. A screen that ran its whole
    stage budget (`screening.max_stages`) left a bracket the confirmation's larger budget
    (`capacity.max_stages`) goes on narrowing, and its runs, measured afresh, seldom re-find the
    screen's verdicts at the bracket's ends: they run `CONFIRM_STAGES` capacity stages on
    average, each about as long as the screen's. Taken as the screen's, the pick's runs were 12-39%
    longer than said in six of seven default studies (docs/results.md, "Confirmation runs
    beyond their screen's stages"). 0: a screen that stopped within its budget, or no budget
    larger than the screen's."""
    ran = [s.elapsed_s for s in row.stages if s.kind != TARGET]
    if not ran or screened.capacity is None or full.capacity is None or len(ran) < screened.capacity.max_stages:
        return 0.0
    more = min(CONFIRM_STAGES, float(full.capacity.max_stages)) - len(ran)
    return max(0.0, more) * (sum(ran) / len(ran) + BETWEEN_STAGES_S)


def rescreened_round_s(
    screens: Sequence[TrialRecord],
    full: Measurement,
    screened: Measurement,
    run_cost: ConfirmationRunCost,
    threshold: float | None,
    front: int,
) -> float | None:
    """A round of the confirmation (a run of each candidate) re-planned once the baselines'
    `screens` are in: each baseline's run from its screen (`searched_run_s`), at least the plan's
    run for where it left its capacity, and `front` front members' runs as planned (`front_seconds`).
    A baseline that missed at the target is planned to stop there where its search stops once
    beaten (`threshold` not None): every front member met the target in its screen. Before the
    screens the plan can only take half the baselines to meet the target; the default study's
    baselines missed it in 16 of 17 runs (docs/results.md). None: a screen's time not stored."""
    total = front * run_cost.front_seconds()
    for row in screens:
        took = searched_run_s(row, full, screened, run_cost, searches_on=threshold is None)
        if took is None:
            return None
        total += max(took, _planned_run_s(row, run_cost, math.inf if threshold is not None else None))
    return total


def estimate_s(
    cands: Sequence[Candidate],
    rows: dict[int, TrialRecord],
    full: Measurement,
    screened: Measurement,
    run_cost: ConfirmationRunCost | None = None,
    threshold: float | None = None,
) -> float | None:
    """One run of each candidate (`run_estimates`), summed."""
    per = run_estimates(cands, rows, full, screened, run_cost, threshold)
    return sum(per.values()) if per is not None else None


def _planned_run_s(row: TrialRecord, run_cost: ConfirmationRunCost | None, beaten_at: float | None = None) -> float:
    if run_cost is None:
        return 0.0
    cap = trial_results.capacity_of(row)
    planned = run_cost.seconds(cap.low, cap.high, beaten_at) if cap is not None else run_cost.seconds()
    return planned if math.isfinite(planned) else 0.0


def upfront_estimate_s(n_candidates: int, runs: int, full: Measurement) -> float | None:
    """Before any trial: the most a phase can take, from the scenario's planned load time."""
    planned = full.planned_s()
    if planned is None:
        return None
    return n_candidates * runs * (START_STOP_ESTIMATE_S + planned + 10.0)
