"""How the loop starts the confirmation phase: the opening line on what follows the search (how many
runs, how long at most), and, once the search is done, its candidates, the plan that pools their
runs and the phase itself (`confirmation`)."""

from __future__ import annotations

from collections.abc import Callable

from search.executor import Measurement, TrialExecutor
from search.scenario import Scenario
from search.study import confirmation as confirmation_mod
from search.study import verdict as verdict_mod
from search.study.opening import OpenedStudy
from search.study.recording import Recording
from serving import LaunchContext


def confirmation_note(sc: Scenario, baselines: int, confirm_runs: int) -> str:
    """The opening line on what follows the search: how many runs, how long at most."""
    if confirm_runs == 0:
        return "no confirmation phase (--confirm-runs 0): the single measurements decide"
    n = sc.confirmation.front + baselines
    full = Measurement(sc.workload, capacity=sc.capacity)
    most = confirmation_mod.upfront_estimate_s(n, confirm_runs, full)
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
    planned_run_s: float | None = None,
) -> verdict_mod.Verdict | None:
    """The confirmation phase after the search: its candidates (none: skipped, said why), the plan
    that pools their runs' requests, and `ConfirmationPhase` run on a fresh executor for that
    measurement. `planned_run_s`: the study's plan of one confirmation run, the least its
    estimate takes for one (`confirmation.estimate_s`)."""
    context = recording.context
    prep = context.prep
    rows = recording.ride(lambda: recording.rows(opened.record))
    cands, notes = recording.ride(
        lambda: confirmation_mod.candidates(context.study, rows, prep, prep.scenario.confirmation.front)
    )
    if not any(c.baseline is None for c in cands):
        context.events.note(
            "confirmation skipped: no sampled configuration met the SLOs in the search, "
            f"nor came within {confirmation_mod.NEAR_MISS:.0%} of them"
        )
        return None
    per_run = recording.ride(
        lambda: confirmation_mod.estimate_s(cands, rows, opened.full, opened.screened, planned_run_s)
    )
    pool = confirmation_mod.pooled_plan(
        verdict_mod.measured_metrics(prep.scenario),
        opened.full,
        confirm_runs,
        per_run / len(cands) if per_run is not None else None,
        len(cands),
    )
    phase = confirmation_mod.ConfirmationPhase(recording, opened, make_executor(opened.ctx, pool.measurement), pool)
    estimate = recording.ride(
        lambda: confirmation_mod.estimate_s(cands, rows, pool.measurement, opened.screened, planned_run_s)
    )
    return phase.run(cands, notes, estimate)
