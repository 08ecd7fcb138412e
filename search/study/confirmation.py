"""The confirmation phase: the front's best and every baseline, re-measured, interleaved.

After the search, the chosen configuration, the next best members of the feasible front
(`confirmation.front` in all) and every baseline that served are each run `confirmation.runs`
times on fresh server starts with the full measurement (the search may have screened short),
in rounds: every candidate once, then again (A B C A B C ...), so drift on a shared machine
hits them alike. Each run is stored before the next starts (waiting for a database that is
away, `ride`); a resumed phase skips the runs it has. The verdict (`search.study.verdict`) is
then read from the stored runs.

The loop starts it here too: the opening line on what follows the search (`confirmation_note`)
and, once the search is done, `confirm`: its candidates (`candidates`), the plan that pools their
runs, the runs' estimate (`confirmation_estimate`), and `ConfirmationPhase` on a fresh executor,
which stops a baseline's capacity search once it is beaten (`baseline_stop`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from loadgen import MetricName
from objectives.statistics import MIN_TAIL_REQUESTS, requests_for_tail, tail_requests
from search import trial_results
from search.executor import Measurement, TrialExecutor, plan_trial
from search.scenario import Scenario
from search.study import verdict as verdict_mod
from search.study.baseline_stop import baseline_search_note, baseline_threshold, beaten_at
from search.study.candidates import NEAR_MISS, Candidate, candidates, rerun_hint
from search.study.confirmation_estimate import estimate_s, run_estimates, upfront_estimate_s
from search.study.cost import ConfirmationRunCost
from search.study.events import (
    ConfirmationFinished,
    ConfirmationRunRecorded,
    ConfirmationRunStarted,
    ConfirmationStarted,
)
from search.study.opening import OpenedStudy
from search.study.pace import ConfirmationPace
from search.study.recording import Recording
from serving import LaunchContext
from storage import queries
from storage.tables import ConfirmationRun, StudyRecord, TrialStatus

# The most runs per candidate a thin percentile may ask for (a scenario with a handful of requests
# per run would otherwise ask for dozens): beyond it the verdict warns that the pool is thin.
MAX_POOLED_RUNS = 10


# The most a thin percentile may lengthen the confirmation's target stage, before it asks for runs.
MAX_STAGE_STRETCH = 3.0


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
