"""The study's plan and cost, said before it runs: each stage's requests and seconds on this
machine, a trial, the study; from a stored calibration without starting anything (the dry run);
a wall-time budget turned into the trials that fit."""

from __future__ import annotations

import dataclasses
import datetime
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import search.study.loop
import search.study.planning
from search.executor import Measurement
from search.prepare import StudyOptions, prepare
from search.scenario import load
from search.study.cost import PASS_SHARE, START_STOP_S, ConfirmationRunCost, StudyCost, study_cost
from search.study.dry_run import plan_lines
from storage import database
from storage.tables import TrialRecord
from tests.support.fakes import ctx
from tests.support.paths import FIXTURES
from tests.support.scripted_executor import ScriptedCalibration, ScriptedExecutor, staged
from tests.support.study_loop import Recorder, runner

SCENARIO = FIXTURES / "scenarios" / "loop_calibrated_capacity.yaml"
CAL = ScriptedCalibration(capacity_rps=8.0, ttft_median_ms=250.0)  # e2el median 600 ms


def test_the_plan_gives_each_stages_requests_and_seconds_at_the_calibrated_rates():
    """8 req/s calibrated, the target at half: 98 requests (a p95 at resolution 4) take 24.5 s at
    4 req/s, a capacity stage (at sqrt(4 x 8) req/s) 17.3 s; each ends with a 0.6 s drain."""
    sc = load(SCENARIO)[0]
    full = Measurement.of(sc, CAL(sc, None, None, None, lambda _: None))
    cost = study_cost(
        full.screened(sc.screening), full, CAL(sc, None, None, None, lambda _: None), trials=10, confirmation_runs=3
    )
    assert cost.target.requests == 98 and cost.target.seconds == pytest.approx(98 / 4 + 0.6)
    assert cost.capacity_stage.rate == pytest.approx(math.sqrt(32))
    assert cost.trial_s > START_STOP_S[False] + cost.target.seconds
    assert cost.total_s == pytest.approx(10 * cost.trial_s + 3 * cost.confirmation_run_s)
    # A confirmation run near the target: its capacity stages bracket a capacity there, at its rate,
    # run on halfway to their cap (123 of 98 to 147 requests, 30.75 s each, then the drain and the
    # reset). Before the search a candidate is that or one that searches down, half and half.
    searched = PASS_SHARE * 2 * (cost.capacity_stage.seconds + 1.5)
    near_target, searched_down = cost.confirmation.seconds(4.0, 4.0), cost.confirmation.seconds(None, 4.0)
    assert near_target - (cost.trial_s - searched) == pytest.approx(3.5 * (123 / 4 + 0.6 + 1.5))
    assert cost.confirmation_run_s == pytest.approx(PASS_SHARE * near_target + (1 - PASS_SHARE) * searched_down)
    lines = cost.lines()
    assert lines[0] == "this machine serves 8 req/s (the calibrated saturation throughput)"
    assert "target stage: 98 requests at 4 req/s, about 25 s" in lines
    assert lines[-2].startswith("plan: a trial about ") and "10 trials and the confirmation (3 runs" in lines[-2]


def test_the_dry_run_plans_from_the_stored_calibration_and_starts_nothing(tmp_path):
    """Before the study: the stages' sizes only. After it calibrated (and stored it): the plan,
    from the stored calibration; nothing is measured again."""
    opts = StudyOptions(
        scenario=str(SCENARIO), storage=f"sqlite:///{tmp_path / 'loop.db'}", study_name="loop", runs_dir=tmp_path
    )
    before = plan_lines(prepare(opts, ctx=ctx()), opts)
    assert before[0].startswith("98 requests a stage, run on to 147 while undecided")
    assert "no calibration stored for study 'loop'" in before[-1]
    calibrate, executor = ScriptedCalibration(capacity_rps=8.0), ScriptedExecutor()
    executor.script = staged(executor)
    runner(tmp_path, executor, scenario=SCENARIO, trials=1, calibrate=calibrate).run()
    stored_trials_took(tmp_path / "loop.db", minutes=3)
    after = plan_lines(prepare(opts, ctx=ctx()), opts)
    assert calibrate.calls == 1
    assert after[0] == "from study 'loop''s stored calibration:"
    # As the study resumed would plan: its trials at the length of the one it ran, the 3 left of 4.
    assert after[1] == (
        "a trial of this study took 3.0 min on average over the 1 it ran (the model plans 0.9): "
        "the plan takes the measured length"
    )
    assert "target stage: 98 requests at 4 req/s, about 25 s" in after
    assert after[-1].startswith("plan: a trial about 3.0 min; 3 trials")
    # Within a budget, what the study would decide: the trials that fit, and whether the confirmation does.
    budgeted = dataclasses.replace(opts, timeout_min=7.0, confirm_runs=0)
    assert plan_lines(prepare(budgeted, ctx=ctx()), budgeted)[-1].startswith(
        "within the budget of 7 min: 2 trials at the plan's pace; the search goes on while"
    )
    budgeted = dataclasses.replace(opts, timeout_min=7.0, confirm_runs=3)
    assert (
        "2 trials at the plan's pace; the confirmation does not fit beside a trial"
        in (plan_lines(prepare(budgeted, ctx=ctx()), budgeted)[-1])
    )


def stored_trials_took(db: Path, *, minutes: float) -> None:
    """Each stored trial's start set `minutes` before its end: trials that took that long."""
    with Session(database.open_db(f"sqlite:///{db}")) as session:
        for row in session.scalars(select(TrialRecord)):
            row.started_at = row.finished_at - datetime.timedelta(minutes=minutes)
        session.commit()


def planned_trial_s() -> float:
    """A screened trial's length in the plan of SCENARIO at CAL's rates."""
    sc = load(SCENARIO)[0]
    cal = CAL(sc, None, None, None, lambda _: None)
    full = Measurement.of(sc, cal)
    return study_cost(full.screened(sc.screening), full, cal, trials=4, confirmation_runs=0).trial_s


def budgeted_study(
    tmp_path, monkeypatch, *, timeout_min: float, confirm_runs: int, pace: float = 1.0
) -> tuple[Recorder, ScriptedExecutor]:
    """A 4-trial study run within `timeout_min` minutes on a clock that each trial moves by `pace`
    times the plan's trial length: (what it said, what it ran)."""
    clock = SimpleNamespace(now=1000.0)
    monkeypatch.setattr(search.study.loop, "time", SimpleNamespace(monotonic=lambda: clock.now))
    monkeypatch.setattr(search.study.planning, "time", SimpleNamespace(monotonic=lambda: clock.now))
    trial_s = planned_trial_s()

    def takes_its_time(plan):
        clock.now += pace * trial_s

    events, executor = Recorder(), ScriptedExecutor(before=takes_its_time)
    executor.script = staged(executor)
    runner(
        tmp_path,
        executor,
        scenario=SCENARIO,
        trials=4,
        timeout_min=timeout_min,
        calibrate=CAL,
        observers=[events],
        confirm_runs=confirm_runs,
    ).run()
    return events, executor


def test_a_wall_time_budget_runs_the_trials_that_fit_beside_the_confirmation(tmp_path, monkeypatch):
    """A 4-trial study in 2 minutes whose trials take what the plan says (54 s): the plan says
    what a trial costs and how many fit, and exactly those run; the plan's lines come first."""
    events, executor = budgeted_study(tmp_path, monkeypatch, timeout_min=2.0, confirm_runs=0)
    budget = next(n for n in events.notes if n.startswith("the budget of 2 min fits"))
    fit = int(budget.split("fits ")[1].split()[0])
    assert fit == 2 and "about 2 trials instead of 4" in budget
    assert len(executor.plans) == fit
    assert events.notes.index(budget) < events.notes.index(next(n for n in events.notes if n.startswith("plan:")))
    assert any(
        n.startswith("wall-time budget reached: 0.2 min left for the search, a trial about 0.9") for n in events.notes
    )
    assert not any(n.startswith("a trial here takes") for n in events.notes)  # the plan held: nothing said again


def test_trials_faster_than_planned_spend_the_budget_on_more_of_them(tmp_path, monkeypatch):
    """The same budget, trials at half the planned length: the deadline, not the plan's count,
    ends the search, so all 4 asked for run; the study says the pace it measured and what is left."""
    events, executor = budgeted_study(tmp_path, monkeypatch, timeout_min=2.0, confirm_runs=0, pace=0.5)
    assert len(executor.plans) == 4
    said = next(n for n in events.notes if n.startswith("a trial here takes"))
    assert said == "a trial here takes about 0.5 min (the mean of 1; planned 0.9): about 3 more trials, 1 min"
    kept = next(n for n in events.notes if n.startswith("the plan said"))
    assert kept.endswith("a trial: planned 0.9 min, 4 took 0.5 min on average (-50%)")


def test_trials_slower_than_planned_stop_before_one_would_overrun_the_budget(tmp_path, monkeypatch):
    """Trials at twice the plan: after the first (1.8 min of 2), the next would end past the
    budget, so none starts, rather than the one the plan counted on."""
    events, executor = budgeted_study(tmp_path, monkeypatch, timeout_min=2.0, confirm_runs=0, pace=2.0)
    assert len(executor.plans) == 1
    assert any(
        n.startswith("wall-time budget reached: 0.2 min left for the search, a trial about 1.8") for n in events.notes
    )


def test_the_baselines_screens_move_the_budgets_deadline_to_the_replanned_confirmation(tmp_path, monkeypatch):
    """A 4-trial study in 12 minutes: the plan's blend reserves about 5 min for the confirmation,
    so all 4 trials fit; the baseline's screen (it searched its capacity down) re-plans the
    confirmation at about 9, and the search's deadline moves with it: 2 more trials fit, not 3,
    and the study's length said again stays within the budget. The same rule gives the search
    more trials where the screens shorten the confirmation."""
    events, executor = budgeted_study(tmp_path, monkeypatch, timeout_min=12.0, confirm_runs=1)
    said = next(n for n in events.notes if n.startswith("the baselines' screens re-plan the confirmation"))
    confirmation = int(re.search(r"about (\d+) min for its 3 runs", said).group(1))
    assert confirmation > 5  # the re-plan is longer than the blend the deadline was first set by
    assert "; within the budget of 12 min the search has room for about 2 more trials;" in said
    assert len(executor.plans) == 3  # the baseline and the 2 that fit beside the re-planned confirmation
    assert int(re.search(r"the study about (\d+) min in all", said).group(1)) <= 12
    assert any(n.startswith("wall-time budget reached") for n in events.notes)


def test_a_confirmation_of_fewer_runs_than_the_cap_reads_at_least_the_screenings_cap():
    """98 requests a stage, run on to 147 while undecided: one confirmation run sends 147, so that
    it never reads fewer requests than a screened target stage could; three runs pool enough."""
    from search.study.confirmation import pooled_plan

    sc = load(SCENARIO)[0]
    full = Measurement.of(sc, CAL(sc, None, None, None, lambda _: None))
    one = pooled_plan(["ttft_p95_ms"], full, 1)
    assert one.runs == 1 and one.measurement.target_requests == 147
    assert one.lines[-1].startswith("the confirmation's target stage sends 147 requests instead of 98")
    assert pooled_plan(["ttft_p95_ms"], full, 3).measurement.target_requests is None


# A confirmation run as the slow CPU's `mixed` study planned it: the target at 0.672 req/s, a
# capacity stage 175 requests (140 run on to 210), the floor a quarter of the target, 5 stages.
RUN = ConfirmationRunCost(
    fixed_s=330.0, stage_requests=175, target_rps=0.672, floor_rps=0.168, max_stages=5, cap_s=None, drain_s=2.0
)


def test_a_confirmation_run_is_planned_where_its_search_left_the_capacity():
    """Each capacity stage sends its requests at its rate: a candidate that missed at the target
    searches down through every stage at half the target (the geometric mean of the target and
    the floor), one whose search met a rate looks near it, and one not yet searched is either,
    half and half (`PASS_SHARE`)."""
    at_target = 330.0 + 3.5 * (175 / 0.672 + 2.0 + 1.5)
    missed = RUN.seconds(None, 0.672)
    assert RUN.seconds() == pytest.approx(PASS_SHARE * at_target + (1 - PASS_SHARE) * missed)
    assert at_target < RUN.seconds() < missed
    assert RUN.seconds(None, 0.6720001) == missed  # the target's rate as stored, to its last bit
    assert missed == pytest.approx(330.0 + 5 * (175 / 0.336 + 2.0 + 1.5))
    # the slow CPU's candidates that missed at the target took 42-43 min a run; planned at the
    # target the plan said 19
    assert missed / 60 == pytest.approx(49.2, abs=0.1) and at_target / 60 == pytest.approx(20.9, abs=0.1)
    assert RUN.seconds(1.0, 1.2) == pytest.approx(330.0 + 3.5 * (175 / math.sqrt(1.2) + 2.0 + 1.5))
    assert RUN.seconds(1.0, None) == pytest.approx(330.0 + 3.5 * (175 / 1.0 + 2.0 + 1.5))


def test_the_confirmations_estimate_takes_at_least_the_plans_run_for_a_candidate_cut_short():
    """A baseline that missed at the target took 100 s in the search (its load cut short), but
    its confirmation runs search its capacity down: each is estimated at least at the plan's run
    for a candidate that missed; a candidate whose search met a rate keeps its own, longer time."""
    from types import SimpleNamespace

    from search.study.candidates import Candidate
    from search.study.confirmation_estimate import estimate_s

    sc = load(SCENARIO)[0]
    full = Measurement.of(sc, CAL(sc, None, None, None, lambda _: None))
    missed = {"rps": 0.0, "low": None, "high": 0.672}
    rows = {
        0: SimpleNamespace(timings={"total_s": 100.0, "load_s": 80.0}, capacity=missed, stages=[]),
        1: SimpleNamespace(
            timings={"total_s": 1200.0, "load_s": 1180.0}, capacity={"rps": 1.1, "low": 1.0, "high": 1.2}, stages=[]
        ),
    }
    cands = [Candidate(0, "vllm_defaults", {}, {}), Candidate(1, None, {}, {})]
    scaled = estimate_s(cands, rows, full, full)  # full against full: nothing rescaled
    assert scaled == pytest.approx(1300.0)
    assert RUN.seconds(1.0, 1.2) < 1200.0
    assert estimate_s(cands, rows, full, full, RUN) == pytest.approx(RUN.seconds(None, 0.672) + 1200.0)
    unplanned = dataclasses.replace(RUN, target_rps=math.nan)
    assert estimate_s(cands, rows, full, full, unplanned) == pytest.approx(1300.0)


def test_a_baseline_that_stops_where_the_others_beat_it_is_planned_without_its_search_down():
    """A baseline that missed at the target (0.672 req/s) where the other candidates beat anything
    below 0.9: its run is the fixed part alone (the target stage in full), not the 49 min of a search
    down; one whose bracket lies below 0.9 measures its two rates. Before the search, a baseline
    is half a front member's run, half stopped there; a front member searches above the target (it
    met the SLOs there in its screen); the study plans each share of the runs so."""
    from types import SimpleNamespace

    from search.study.candidates import Candidate
    from search.study.confirmation_estimate import estimate_s

    assert RUN.seconds(None, 0.672, beaten_at=0.9) == 330.0
    assert RUN.seconds(None, 0.672, beaten_at=0.5) == RUN.seconds(None, 0.672)  # not beaten there: searched down
    assert RUN.seconds(0.5, 0.6, beaten_at=0.9) == pytest.approx(330.0 + 2 * (175 / math.sqrt(0.3) + 2.0 + 1.5))
    at_target = 330.0 + 3.5 * (175 / 0.672 + 2.0 + 1.5)  # RUN has no near_rps: the target's
    assert RUN.baseline_seconds() == pytest.approx(PASS_SHARE * at_target + (1 - PASS_SHARE) * 330.0)

    sc = load(SCENARIO)[0]
    cal = CAL(sc, None, None, None, lambda _: None)
    full = Measurement.of(sc, cal)
    plain = study_cost(full.screened(sc.screening), full, cal, trials=1, confirmation_runs=3)
    mixed = study_cost(full.screened(sc.screening), full, cal, trials=1, confirmation_runs=3, shares=(1 / 3, 2 / 3))
    run = plain.confirmation
    # a front member: its stages where a screened trial's search goes, at sqrt(4 x 8) req/s
    assert run.front_seconds() == pytest.approx(run.seconds(math.sqrt(32), math.sqrt(32)))
    assert mixed.confirmation_run_s == pytest.approx((run.front_seconds() + 2 * run.baseline_seconds()) / 3)
    assert mixed.confirmation_run_s < plain.confirmation_run_s

    # Once searched: the baseline's run is planned stopped where the other candidate's met rate
    # (1.0 req/s, over 1.05) lies above its miss at the target.
    rows = {
        0: SimpleNamespace(
            status="ok",
            trial_number=0,
            timings={"total_s": 100.0, "load_s": 80.0},
            capacity={"rps": 0.0, "low": None, "high": 0.672},
            stages=[],
        ),
        1: SimpleNamespace(
            status="ok",
            trial_number=1,
            timings={"total_s": 1200.0, "load_s": 1180.0},
            capacity={"rps": 1.1, "low": 1.0, "high": 1.2},
            stages=[],
        ),
    }
    cands = [Candidate(1, None, {}, {}), Candidate(0, "vllm_defaults", {}, {})]
    assert estimate_s(cands, rows, full, full, RUN, threshold=0.05) == pytest.approx(330.0 + 1200.0)
    assert estimate_s(cands, rows, full, full, RUN) == pytest.approx(RUN.seconds(None, 0.672) + 1200.0)


def test_a_candidates_run_is_its_search_trial_with_the_confirmations_target_stage_swapped_in():
    """The screening allows 4 capacity stages, the confirmation 4: a candidate's confirmation run
    looks where its search bracketed the capacity, and its screen stopped within its budget (its
    bracket narrowed to the precision), so its capacity stages stand. Its target stage is the confirmation's in
    full: the screened one ran on undecided to 117 s where the full one sends its 98 requests in 24.5.
    A target stage lengthened 1.5x lengthens that stage alone, not the capacity stages after it
    (the slowed study's pick: 14.8 min a trial, 12.9 a run, which scaling the whole load made 22)."""
    from types import SimpleNamespace

    from search.scenario import Screening
    from search.study.candidates import Candidate
    from search.study.confirmation_estimate import estimate_s

    sc = load(SCENARIO)[0]
    full = Measurement.of(sc, CAL(sc, None, None, None, lambda _: None))
    screened = full.screened(Screening(max_stages=4))
    assert full.capacity.max_stages == 4
    target = SimpleNamespace(kind="target", elapsed_s=117.0)
    probes = [SimpleNamespace(kind="capacity", elapsed_s=50.0) for _ in range(3)]
    rows = {
        1: SimpleNamespace(
            timings={"total_s": 280.0, "load_s": 270.0}, capacity={"rps": 1.1, "low": 1.0}, stages=[target, *probes]
        )
    }
    cands = [Candidate(1, None, {}, {})]
    run = dataclasses.replace(RUN, fixed_s=0.0, stage_requests=1, drain_s=0.5)  # its floor: 10 s
    # the full target stage: 98 requests at 4 req/s, 24.5 s, then its drain
    assert estimate_s(cands, rows, full, screened, run) == pytest.approx(280.0 - 117.0 + 24.5 + 0.5)
    longer = dataclasses.replace(full, target_requests=147)
    assert estimate_s(cands, rows, longer, screened, run) == pytest.approx(280.0 - 117.0 + 147 / 4 + 0.5)
    # A trial that stored no stages: its load scaled by the two measurements' target stages.
    rows[1].stages = []
    assert estimate_s(cands, rows, full, screened) == pytest.approx(280.0)
    lengthened = dataclasses.replace(full, target_requests=math.ceil(1.5 * full.stage_size().requests))
    assert estimate_s(cands, rows, lengthened, screened) == pytest.approx(10.0 + 270.0 * 147 / 98)


def test_a_screen_cut_by_its_stage_budget_leaves_the_confirmation_more_stages_to_run():
    """The screening allows 3 capacity stages, the confirmation 4, and the pick's screen ran all 3:
    its bracket is wider than the precision, and the confirmation's runs (measured afresh, seldom
    re-finding the screen's verdicts) run `CONFIRM_STAGES` of them on average, each about as
    long as the screen's: half a stage more here. A baseline whose search stops once the others
    beat it runs none beyond its screen's; neither does a candidate whose screen stopped within its budget."""
    from types import SimpleNamespace

    from search.scenario import Screening
    from search.study.candidates import Candidate
    from search.study.confirmation_estimate import estimate_s, rescreened_round_s
    from search.study.cost import BETWEEN_STAGES_S, CONFIRM_STAGES

    sc = load(SCENARIO)[0]
    full = Measurement.of(sc, CAL(sc, None, None, None, lambda _: None))
    screened = full.screened(Screening(max_stages=3))
    target = SimpleNamespace(kind="target", elapsed_s=117.0)
    probes = [SimpleNamespace(kind="capacity", elapsed_s=50.0) for _ in range(3)]
    row = SimpleNamespace(
        status="ok",
        trial_number=1,
        baseline=None,
        timings={"total_s": 280.0, "load_s": 270.0},
        capacity={"rps": 1.1, "low": 1.0, "high": 1.2},
        stages=[target, *probes],
    )
    run = dataclasses.replace(RUN, fixed_s=0.0, stage_requests=1, drain_s=0.5)
    swapped = 280.0 - 117.0 + 24.5 + 0.5
    more = (min(CONFIRM_STAGES, 4) - 3) * (50.0 + BETWEEN_STAGES_S)
    assert more > 0
    assert estimate_s([Candidate(1, None, {}, {})], {1: row}, full, screened, run) == pytest.approx(swapped + more)

    # The same screen as a baseline's that stops once beaten (a threshold): its stages stand.
    baseline = SimpleNamespace(**{**vars(row), "baseline": "vllm_defaults"})
    assert rescreened_round_s([baseline], full, screened, run, 0.05, front=0) == pytest.approx(swapped)
    assert rescreened_round_s([baseline], full, screened, run, None, front=0) == pytest.approx(swapped + more)

    # A screen that stopped after 2 of its 3 stages narrowed its bracket: they stand.
    row.stages = [target, *probes[:2]]
    assert estimate_s([Candidate(1, None, {}, {})], {1: row}, full, screened, run) == pytest.approx(swapped)


def test_a_session_stage_is_planned_to_end_with_its_last_session():
    """chat_sessions: the last session starts as the sending ends, then its 5.5 turns (0.6 s each
    here) and the 4.5 pauses of 2 s between them go on."""
    import dataclasses

    from tests.support.paths import REPO

    sc = load(REPO / "configs" / "chat_sessions.yaml")[0]
    base = CAL(sc, None, None, None, lambda _: None)
    turns = {f"{k}@{c}": v for k, v in base.unloaded.items() for c in ("first", "later")}
    cal = dataclasses.replace(base, unloaded={**base.unloaded, **turns})
    full = Measurement.of(sc, cal)
    cost = study_cost(full.screened(sc.screening), full, cal, trials=3, confirmation_runs=1)
    rate = cost.target.rate
    assert cost.target.seconds == pytest.approx(cost.target.requests / rate + 5.5 * 0.6 + 4.5 * 2.0)


def test_a_budget_that_fits_no_trial_beside_the_confirmation_spends_itself_on_the_search(tmp_path, monkeypatch):
    """A 4-trial study in 2 minutes whose confirmation alone would take longer: the search runs
    the trials that fit, the confirmation is left for `autotune confirm` (said with the study's
    name), rather than a study that runs nothing."""
    events, executor = budgeted_study(tmp_path, monkeypatch, timeout_min=2.0, confirm_runs=3)
    dropped = next(n for n in events.notes if "does not fit the confirmation" in n)
    assert dropped.endswith("runs it on what the search found") and "--study loop" in dropped
    fitted = next(n for n in events.notes if "more trials" in n)  # the trials that fit, and nothing beside them
    assert "(no confirmation in this run)" in fitted and "and the confirmation" not in fitted
    assert len(executor.plans) >= 1
    assert not [e for e in events.events if e[0] == "confirmation_started"]


def test_a_dry_run_with_workers_plans_and_starts_no_worker(tmp_path, monkeypatch, capsys):
    """`search --workers N --dry-run` says the plan, as without workers, and starts none."""
    import app.cli.studies as studies
    import search.prepare
    from app.cli import main

    def no_workers(options):
        raise AssertionError("a dry run started the workers")

    monkeypatch.setattr(studies, "_search_on_workers", no_workers)
    monkeypatch.setattr(search.prepare, "prepare", lambda opts: prepare(opts, ctx=ctx()))  # no machine probe
    storage = f"sqlite:///{tmp_path / 'loop.db'}"
    rc = main(
        ["search", str(SCENARIO), "--workers", "2", "--dry-run", "--storage", storage, "--runs-dir", str(tmp_path)]
    )
    assert rc == 0
    assert "98 requests a stage" in capsys.readouterr().out


def test_a_resumed_study_plans_its_trials_at_the_length_of_those_it_ran(tmp_path, monkeypatch):
    """Two trials stored at 3 min each where the model plans 0.9: resumed within 10 minutes, the
    plan takes the measured 3 min, so 3 more trials fit, not the model's 11 (4 asked for)."""
    first = ScriptedExecutor()
    first.script = staged(first)
    done = runner(tmp_path, first, scenario=SCENARIO, trials=2, calibrate=CAL)
    done.run()
    stored_trials_took(tmp_path / "loop.db", minutes=3)
    clock = SimpleNamespace(now=1000.0)
    monkeypatch.setattr(search.study.loop, "time", SimpleNamespace(monotonic=lambda: clock.now))
    monkeypatch.setattr(search.study.planning, "time", SimpleNamespace(monotonic=lambda: clock.now))

    def three_minutes(plan):
        clock.now += 180

    events, executor = Recorder(), ScriptedExecutor(before=three_minutes)
    executor.script = staged(executor)
    runner(tmp_path, executor, scenario=SCENARIO, trials=6, timeout_min=10.0, calibrate=CAL, observers=[events]).run()
    said = next(n for n in events.notes if n.startswith("a trial of this study took"))
    assert said == "a trial of this study took 3.0 min on average over the 2 it ran (the model plans 0.9): " + (
        "the plan takes the measured length"
    )
    assert any(n.startswith("the budget of 10 min fits 3 more trials") for n in events.notes)
    assert any(n.startswith("plan: a trial about 3.0 min; 3 trials") for n in events.notes)
    assert len(executor.plans) == 3


@pytest.mark.parametrize(
    "trials, budget_min, fit, confirmed, dropped",
    [
        (10, 20.0, 5, 3, False),  # 15 min of confirmation leaves 5 trials of 1 min
        (10, 40.0, 10, 3, False),  # all asked fit: nothing trimmed
        (10, 12.0, 10, 0, True),  # no trial fits beside the confirmation: the search takes the budget
        (0, 12.0, 0, 3, False),  # no trial left: the confirmation is the study, kept
    ],
)
def test_a_budget_decides_the_trials_and_whether_the_confirmation_runs(trials, budget_min, fit, confirmed, dropped):
    """The one budget decision the study and its dry run both make (`StudyCost.within`)."""
    cost = StudyCost(None, None, None, None, trial_s=60.0, confirmation_run_s=300.0, confirmation_runs=3, trials=trials)
    budgeted = cost.within(budget_min * 60)
    assert (budgeted.cost.trials, budgeted.cost.confirmation_runs) == (fit, confirmed)
    assert budgeted.confirmation_dropped is dropped and budgeted.trimmed is (fit < trials)


def test_the_confirmations_pace_takes_each_candidates_measured_runs_over_its_plan():
    """Planned: the pick 6 min a run, a baseline 18. Once the baseline's first run took 27 min,
    its later runs are expected to take that; the pick's stay at its plan until measured."""
    from search.study.pace import ConfirmationPace

    pace = ConfirmationPace({2: 360.0, 0: 1080.0})
    assert pace.left_s([2, 0, 2, 0]) == pytest.approx(2 * 360 + 2 * 1080)
    pace = pace.after(0, 1620.0)
    assert pace.left_s([2, 0]) == pytest.approx(360 + 1620)
    assert pace.after(0, 1500.0).run_s(0) == pytest.approx(1560.0)
    assert pace.text([2, 0]) == "confirmation: 2 runs to go, about 33 min"
    assert pace.text([0]) == "confirmation: 1 run to go, about 27 min"
    assert pace.text([]) is None and pace.text([7]) is None  # nothing left; a candidate not planned


def test_the_baselines_screens_replan_the_confirmation_from_where_they_left_their_capacity():
    """Before the search a baseline is half a front member's run, half its target stage alone.
    Once screened: one that missed at the target (its screen cut short at 42 s) stops there in
    its confirmation runs, the full target stage after a start (`RUN.fixed_s`); under a full
    search it searches down; the front members stay as planned."""
    from types import SimpleNamespace

    from search.study.confirmation_estimate import rescreened_round_s

    sc = load(SCENARIO)[0]
    full = Measurement.of(sc, CAL(sc, None, None, None, lambda _: None))
    missed = SimpleNamespace(
        timings={"total_s": 53.0, "load_s": 46.0},
        capacity={"rps": 0.0, "low": None, "high": 0.672},
        stages=[SimpleNamespace(kind="target", elapsed_s=42.0)],
    )
    stopped = rescreened_round_s([missed], full, full, RUN, 0.05, front=1)
    assert stopped == pytest.approx(RUN.front_seconds() + RUN.fixed_s)
    assert stopped < RUN.front_seconds() + RUN.baseline_seconds()  # the plan before the screens
    searched = rescreened_round_s([missed], full, full, RUN, None, front=1)
    assert searched == pytest.approx(RUN.front_seconds() + RUN.seconds(None, 0.672))


def test_the_study_says_its_length_again_once_the_baselines_are_screened(tmp_path):
    """After the baseline's screen (trial 0) the study re-plans its confirmation and says its
    length again, the trials left at the plan's length of a trial; its closing line holds both
    figures to account."""
    executor, recorder = ScriptedExecutor(), Recorder()
    executor.script = staged(executor)
    calibrate = ScriptedCalibration(capacity_rps=8.0)
    r = runner(
        tmp_path, executor, scenario=SCENARIO, trials=3, calibrate=calibrate, confirm_runs=1, observers=(recorder,)
    )
    r.run()
    notes = [str(e) for name, e in recorder.events if name == "note"]
    said = [x for x in notes if x.startswith("the baselines' screens re-plan the confirmation: about ")]
    assert len(said) == 1 and "for its 3 runs (the plan said 5); the study about " in said[0]
    # The 2 trials left at the plan's 0.9 min a trial, not at the baseline's pace (no time here).
    confirmation, study = map(int, re.findall(r"about (\d+) min", said[0]))
    assert study - confirmation >= 1
    closing = next(x for x in notes if x.startswith("the plan said about "))
    assert " once the baselines were screened; it took " in closing
    # The scripted baseline missed the SLOs at the target (it met them below): the closing line holds
    # that case to account too.
    assert " in the case the baselines' screens picked (they missed the SLOs at the target), " in closing


def test_the_plan_says_the_studys_length_if_the_baselines_miss_and_if_they_meet():
    """Whether the baselines meet the SLOs at the target moves a default study's length most (a
    baseline that misses ends its confirmation runs at its target stage; one that meets searches
    its capacity above it), and their screens settle it: the plan gives the study's length in
    both cases beside its blend. With no baseline there is no case to give."""
    sc = load(SCENARIO)[0]
    cal = CAL(sc, None, None, None, lambda _: None)
    full = Measurement.of(sc, cal)
    cost = study_cost(full.screened(sc.screening), full, cal, trials=10, confirmation_runs=3, shares=(1 / 3, 2 / 3))
    run = cost.confirmation
    miss, meet = cost.baseline_cases
    assert miss == pytest.approx((run.front_seconds() + 2 * run.fixed_s) / 3)
    assert meet == pytest.approx(run.front_seconds())
    assert miss < cost.confirmation_run_s < meet
    said = f"plan: about {cost.total_if(miss) / 60:.0f} min if the baselines miss the SLOs at the target"
    assert cost.lines()[-1].startswith(said)
    assert f", {cost.total_if(meet) / 60:.0f} if they meet them; their screens" in cost.lines()[-1]
    # Baselines searched in full (no front member's share): the case is that of a candidate not yet searched.
    searched = study_cost(full.screened(sc.screening), full, cal, trials=10, confirmation_runs=3, shares=(0, 0))
    assert searched.baseline_cases == (
        pytest.approx(run.seconds(meets=False)),
        pytest.approx(run.seconds(meets=True)),
    )
    alone = study_cost(full.screened(sc.screening), full, cal, trials=10, confirmation_runs=3, shares=(1.0, 0.0))
    assert not any("if the baselines miss" in line for line in alone.lines())


def test_a_study_gives_the_baselines_cases_until_their_screens_are_in(tmp_path):
    """The study's first plan gives both cases; resumed once its baseline (trial 0) is screened,
    its plan gives neither: the screens said which."""

    def said(trials: int) -> list[str]:
        executor, recorder = ScriptedExecutor(), Recorder()
        executor.script = staged(executor)
        calibrate = ScriptedCalibration(capacity_rps=8.0)
        r = runner(
            tmp_path,
            executor,
            scenario=SCENARIO,
            trials=trials,
            calibrate=calibrate,
            confirm_runs=1,
            observers=(recorder,),
        )
        r.run()
        return [str(e) for name, e in recorder.events if name == "note"]

    first = said(3)
    assert any(n.startswith("plan: about ") and "if the baselines miss the SLOs" in n for n in first)
    assert not any("if the baselines miss the SLOs" in n for n in said(4))


def test_the_baselines_screens_pick_the_plans_case_where_they_all_agree():
    """Every baseline met the SLOs at the target (4 req/s): the case where they meet; none did
    (one met only below the target, searching down): the case where they miss; some did: no case."""
    from search.study.planning import picked_case

    sc = load(SCENARIO)[0]
    cal = CAL(sc, None, None, None, lambda _: None)
    full = Measurement.of(sc, cal)
    cost = study_cost(full.screened(sc.screening), full, cal, trials=10, confirmation_runs=3, shares=(1 / 3, 2 / 3))
    miss, meet = (cost.total_if(s) for s in cost.baseline_cases)

    def screen(low):
        return SimpleNamespace(capacity={"rps": low or 0.0, "low": low, "high": 6.0}, stages=[])

    assert picked_case(cost, [screen(5.0), screen(4.0)]) == ("they met the SLOs at the target", pytest.approx(meet))
    assert picked_case(cost, [screen(None), screen(2.0)]) == (
        "they missed the SLOs at the target",
        pytest.approx(miss),
    )
    assert picked_case(cost, [screen(5.0), screen(None)]) is None
    assert picked_case(dataclasses.replace(cost, baseline_cases=None), [screen(5.0)]) is None
