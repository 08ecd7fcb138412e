"""The confirmation phase: the front's best and every baseline, re-measured, interleaved.

After the search, the chosen configuration, the next best members of the feasible front
(`confirmation.front` in all) and every baseline that served are each run `confirmation.runs`
times on fresh server starts with the full measurement (the search may have screened short),
in rounds: every candidate once, then again (A B C A B C ...), so drift on a shared machine
hits them alike. Each run is stored before the next starts (waiting for a database that is
away, `ride`); a resumed phase skips the runs it has. The verdict (`search.study.verdict`) is
then read from the stored runs.

The loop starts it here too: the opening line on what follows the search (`confirmation_note`)
and, once the search is done, `confirm`: its candidates, the plan that pools their runs, and
`ConfirmationPhase` on a fresh executor.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from sqlalchemy.orm import Session

from loadgen import MetricName
from objectives.capacity import SLO_CAPACITY_RPS
from objectives.statistics import MIN_TAIL_REQUESTS, requests_for_tail, tail_requests
from search import pareto, trial_results
from search.executor import Measurement, TrialExecutor, plan_trial
from search.prepare import Prepared
from search.scenario import Scenario
from search.study import verdict as verdict_mod
from search.study.cost import ConfirmationPace, ConfirmationRunCost
from search.study.events import (
    ConfirmationFinished,
    ConfirmationRunRecorded,
    ConfirmationRunStarted,
    ConfirmationStarted,
)
from search.study.opening import OpenedStudy
from search.study.recording import Recording
from serving import LaunchContext
from storage import queries
from storage.tables import ConfirmationRun, StudyRecord, TrialRecord, TrialStatus

# A server start and stop on this CPU (benchmarks/bench_startup.py: 34-45 s eager), for the estimate
# made before the search has timed any trial.
START_STOP_ESTIMATE_S = 45.0
# The most runs per candidate a thin percentile may ask for (a scenario with a handful of requests
# per run would otherwise ask for dozens): beyond it the verdict warns that the pool is thin.
MAX_POOLED_RUNS = 10
# With nothing sampled feasible, sampled configs that missed an SLO by at most this fraction of its
# bound are confirmed: one screen's short-request TTFT tail can move by more than that between
# the search and the confirmation of one config (docs/results.md, "Confirmation").
NEAR_MISS = 0.25
# The most a thin percentile may lengthen the confirmation's target stage, before it asks for runs.
MAX_STAGE_STRETCH = 3.0


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


@dataclass(frozen=True)
class PooledPlan:
    """What the confirmation measures so that its pooled percentiles rest on enough requests:
    the measurement (its target stage run in full, lengthened where needed), the runs per candidate, and a
    line per percentile that asked for more, with what it costs."""

    measurement: Measurement
    runs: int
    lines: list[str]


def pooled_plan(
    metrics: Sequence[str], full: Measurement, runs: int, run_s: float | None = None, n_candidates: int = 1
) -> PooledPlan:
    """Lengthen the target stage (up to `MAX_STAGE_STRETCH` times), then add runs (up to
    `MAX_POOLED_RUNS`), until the runs' pooled requests put at least `MIN_TAIL_REQUESTS` above
    each percentile among `metrics`. A longer stage is the cheaper way to more requests: a run
    costs a server start and the capacity stages besides its target stage. `run_s`: one run's
    estimated seconds, for the cost line. Beyond both caps the verdict warns that the pool is thin."""
    workload = full.workload
    size = full.stage_size()
    # The pool holds at least what one screened target stage holds at its cap: a confirmation of
    # fewer runs than the cap's stretch would otherwise read fewer requests than the screening.
    screened_cap = size.most / size.requests if size is not None and size.requests else 1.0
    stretch, planned, lines = 1.0, runs, []
    for metric in metrics:
        name = MetricName.parse(metric)
        per_run = full.expected_target_requests(name.cls)
        q = verdict_mod.pooled_quantile(metric)
        if q is None or not per_run:
            continue
        need = max(requests_for_tail(q, MIN_TAIL_REQUESTS), per_run * screened_cap)
        if per_run * runs >= need:
            continue
        pool = (
            f"{metric}: ~{per_run:.0f} requests per run, so {runs} runs pool {per_run * runs:.0f} with "
            f"{tail_requests(q, int(per_run * runs))} above the percentile"
        )
        s = min(MAX_STAGE_STRETCH, need / (per_run * runs))
        n = min(MAX_POOLED_RUNS, max(runs, math.ceil(round(need / (per_run * s), 9))))
        if per_run * s * n < need:
            lines.append(
                f"{pool}; even {n} runs of a {MAX_STAGE_STRETCH:g}x longer target stage leave fewer "
                f"than {MIN_TAIL_REQUESTS} above it: lengthen the target stage (workload.num_requests)"
            )
        else:
            lines.append(
                f"{pool}; {n} runs of a {s:.2f}x longer target stage put "
                f"{tail_requests(q, int(per_run * s * n))} above it"
            )
        stretch, planned = max(stretch, s), max(planned, n)
    if stretch > 1.0 and size is not None:  # the same sequence's first requests, then more of it
        longer = math.ceil(size.requests * stretch)
        lines.append(
            f"the confirmation's target stage sends {longer} requests instead of {size.requests} (the screening's "
            f"and then more of the same sequence) so that every percentile is read from enough pooled requests"
        )
        full = dataclasses.replace(full, target_requests=longer)
    elif stretch > 1.0:
        update = {
            k: math.ceil(getattr(workload, k) * stretch)
            for k in ("duration_s", "num_requests")
            if getattr(workload, k) is not None
        }
        workload = workload.model_copy(update=update)
        what = ", ".join(f"{k} {v:g} instead of {getattr(full.workload, k):g}" for k, v in update.items())
        extra_s = (workload.duration_s or 0) - (full.workload.duration_s or 0)
        cost = f" (+{extra_s:.0f} s of load a run)" if extra_s else ""
        lines.append(
            f"the confirmation's target stage runs {what}{cost} so that every percentile is read from "
            f"enough pooled requests"
        )
    if planned > runs:
        extra = (planned - runs) * n_candidates
        cost = f", about {extra * run_s / 60:.0f} min more" if run_s else ""
        lines.append(f"the confirmation runs {planned} runs per candidate instead of {runs} (+{extra} runs{cost})")
    return PooledPlan(dataclasses.replace(full, workload=workload, full_target=True), planned, lines)


def schedule(cands: Sequence[Candidate], runs: int) -> list[tuple[int, Candidate]]:
    """(round, candidate) in running order: every candidate once per round, rounds in turn."""
    return [(r, c) for r in range(runs) for c in cands]


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
        took = searched_run_s(row, full, screened, run_cost)
        if took is None:
            return None
        stop = beaten_at(c, cands, searched, threshold) if threshold is not None else None
        out[c.trial_number] = max(took, _planned_run_s(row, run_cost, stop))
    return out


def searched_run_s(
    row: TrialRecord, full: Measurement, screened: Measurement, run_cost: ConfirmationRunCost | None
) -> float | None:
    """A confirmation run of a searched configuration, from its search trial's time: the trial with
    its target stage as it ran (cut short by an early abort, or run on undecided) swapped for the
    confirmation's, which sends its planned requests in full, then drains. The capacity
    stages stand: a confirmation run looks first where the search bracketed the capacity, and
    measured about as many stages as the screen (docs/results.md, "Confirmation runs that stop
    once beaten"). Where the trial stored no stages or the measurement has none, its load is
    scaled by the two measurements' target stages instead. None: the trial's time was not stored."""
    t = trial_results.timings_of(row)
    if t.total_s is None:
        return None
    screened_target, full_target = trial_results.target_elapsed_s(row), full.target_sending_s()
    if screened_target is not None and full_target is not None:
        return t.total_s - screened_target + full_target + (run_cost.drain_s if run_cost is not None else 0.0)
    full_s, short_s = full.target_planned_s(), screened.target_planned_s()
    scale = full_s / short_s if full_s and short_s else 1.0
    load = t.load_s or 0.0
    return t.total_s - load + load * scale


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
        took = searched_run_s(row, full, screened, run_cost)
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


class ConfirmationPhase:
    """Runs the schedule `pool` plans on `executor` (built on its measurement), planning each run
    on the opened study's launch context, scoring it as `recording` scores a trial and storing it
    through the recording's session, each read and write ridden out while the database is away
    (`Recording.ride`); the verdict is then read from the stored runs of the candidates it planned."""

    def __init__(self, recording: Recording, opened: OpenedStudy, executor: TrialExecutor, pool: PooledPlan):
        self.recording, self.opened, self.executor = recording, opened, executor
        self.prep, self.events, self.ride = recording.context.prep, recording.context.events, recording.ride
        self.runs = pool.runs
        self.pool_lines = list(pool.lines)  # what `pooled_plan` lengthened or added, and its cost

    def run(
        self, cands: Sequence[Candidate], notes: list[str], estimates: dict[int, float] | None
    ) -> verdict_mod.Verdict:
        """`estimates`: a run of each candidate, by trial number (`run_estimates`; None: unknown)."""
        session, rec = self.recording.session, self.opened.record
        pace = ConfirmationPace(estimates or {})
        notes = [*notes, *self.pool_lines]

        def begin() -> list[ConfirmationRun]:
            rec.confirmation = {"runs": self.runs, "candidates": [c.trial_number for c in cands], "notes": notes}
            session.commit()
            return queries.confirmation_runs(session, rec)

        stored = self.ride(begin)
        done = {(r.trial_number, r.round) for r in stored}
        for r in stored:  # a resumed phase paces its candidates by the runs they already took
            if (took := trial_results.timings_of(r).total_s) is not None:
                pace = pace.after(r.trial_number, took)
        plan = schedule(cands, self.runs)
        todo = [(i, r, c) for i, (r, c) in enumerate(plan) if (c.trial_number, r) not in done]
        left = [c.trial_number for _, _, c in todo]
        expected = pace.left_s(left)
        self.events.confirmation_started(
            ConfirmationStarted(
                [c.label for c in cands], self.runs, len(todo), expected if math.isfinite(expected) else None, notes
            )
        )
        phase_began = time.monotonic()
        for k, (i, round_, cand) in enumerate(todo):
            label = f"confirm {i + 1}/{len(plan)} (round {round_ + 1}): {cand.label}"
            self.events.confirmation_run_started(ConfirmationRunStarted(label, cand.trial_number))
            began = time.monotonic()
            row = self._run_one(session, rec, i, round_, cand, cands)
            pace = pace.after(cand.trial_number, time.monotonic() - began)
            ahead = pace.text(left[k + 1 :])  # None until every candidate left is planned or measured
            self.events.confirmation_run_recorded(ConfirmationRunRecorded(row, label, ahead))
        if todo and expected > 0 and math.isfinite(expected):  # the estimate it said, held to account
            took = time.monotonic() - phase_began
            self.events.note(
                f"the confirmation said about {expected / 60:.0f} min for its {len(todo)} runs; "
                f"it took {took / 60:.0f} min ({took / expected - 1:+.0%})"
            )
        result = self.ride(lambda: self._verdict(session, rec, cands))
        self.events.confirmation_finished(ConfirmationFinished(result))
        return result

    def _verdict(self, session: Session, rec: StudyRecord, cands: Sequence[Candidate]) -> verdict_mod.Verdict:
        """The verdict on the stored runs of `cands`: the plan `run` stored first, which
        `stored_verdict` would read back from the record."""
        runs = queries.confirmation_runs(session, rec)
        result = verdict_mod.decide(runs, self.prep.scenario, [c.trial_number for c in cands], self.runs)
        if result.outcome != verdict_mod.Outcome.INCOMPLETE:
            rec.noise = {k: v for k, v in result.noise.items() if math.isfinite(v)}
            session.commit()
        return result

    def _run_one(
        self,
        session: Session,
        rec: StudyRecord,
        sequence: int,
        round_: int,
        cand: Candidate,
        cands: Sequence[Candidate],
    ) -> ConfirmationRun:
        p = self.prep
        plan = plan_trial(
            cand.trial_number,
            cand.baseline,
            cand.params,
            cand.config,
            self.opened.ctx,
            p.scenario.workload.longest_request_tokens(),
            p.shown,
        )
        plan.run_name = f"confirm-r{round_ + 1}-trial-{cand.trial_number:04d}"
        stored = self.ride(lambda: queries.confirmation_runs(session, rec))
        plan.capacity_hint = rerun_hint(cand, stored)
        if (threshold := baseline_threshold(p.scenario)) is not None:
            plan.beaten_at = beaten_at(cand, cands, stored, threshold)
        outcome = self.executor.run(plan, self.events.phase)
        self.events.phase("scoring")
        ok = outcome.status == TrialStatus.OK
        s = self.recording.score(self.opened, outcome.metrics, ok)

        record = trial_results.confirmation_record(
            cand.trial_number, cand.baseline, round_, sequence, outcome, s.constraints
        )

        def store() -> ConfirmationRun:
            row = queries.save_confirmation_run(session, rec, record)
            session.commit()
            return row

        return self.ride(store)


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


def confirmation_note(sc: Scenario, baselines: int, confirm_runs: int) -> str:
    """The opening line on what follows the search: how many runs, how long at most."""
    if confirm_runs == 0:
        return "no confirmation phase (--confirm-runs 0): the single measurements decide"
    n = sc.confirmation.front + baselines
    full = Measurement(sc.workload, capacity=sc.capacity)
    most = upfront_estimate_s(n, confirm_runs, full)
    when = f", about {most / 60:.0f} min at most" if most else ""
    screening = (
        " (the search screens with a shorter measurement; confirmation runs the full one)" if sc.screening else ""
    )
    return (
        f"after the search: confirmation of up to {n} candidates x {confirm_runs} runs on fresh "
        f"servers, interleaved{when}{screening}; --confirm-runs 0 skips it"
    )


def confirm(
    recording: Recording,
    opened: OpenedStudy,
    confirm_runs: int,
    make_executor: Callable[[LaunchContext, Measurement], TrialExecutor],
    run_cost: ConfirmationRunCost | None = None,
) -> verdict_mod.Verdict | None:
    """The confirmation phase after the search: its candidates (none: skipped, said why), the plan
    that pools their runs' requests, and `ConfirmationPhase` run on a fresh executor for that
    measurement. `run_cost`: the study's plan of a confirmation run, the least its estimate takes
    for each candidate (`estimate_s`)."""
    context = recording.context
    prep = context.prep
    rows = recording.ride(lambda: recording.rows(opened.record))
    cands, notes = recording.ride(lambda: candidates(context.study, rows, prep, prep.scenario.confirmation.front))
    if not any(c.baseline is None for c in cands):
        context.events.note(
            "confirmation skipped: no sampled configuration met the SLOs in the search, "
            f"nor came within {NEAR_MISS:.0%} of them"
        )
        return None
    threshold = baseline_threshold(prep.scenario)
    if (note := baseline_search_note(prep.scenario, cands)) is not None:
        notes.append(note)
    per_run = recording.ride(lambda: estimate_s(cands, rows, opened.full, opened.screened, run_cost, threshold))
    pool = pooled_plan(
        verdict_mod.measured_metrics(prep.scenario),
        opened.full,
        confirm_runs,
        per_run / len(cands) if per_run is not None else None,
        len(cands),
    )
    phase = ConfirmationPhase(recording, opened, make_executor(opened.ctx, pool.measurement), pool)
    estimates = recording.ride(
        lambda: run_estimates(cands, rows, pool.measurement, opened.screened, run_cost, threshold)
    )
    return phase.run(cands, notes, estimates)
