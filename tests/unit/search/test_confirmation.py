"""The confirmation phase on a scripted executor: re-measurement beats the winner's curse,
interleaved rounds, resume mid-phase, keeping the baseline, screening against the full measurement.

Real Optuna, SQLite, scoring and verdict; no vLLM. Scenario: tests/fixtures/scenarios/
loop_confirm.yaml (max_num_seqs 16, 8 and 4 enqueued in that order, then the baseline; TTFT decides).
"""

from dataclasses import dataclass, field

import pytest
from sqlalchemy.orm import Session

from app.outputs import verdict_headline, verdict_text
from loadgen import CLIENT_BEHIND
from objectives.capacity import CapacityEstimate
from search.study.verdict import Outcome, decide
from storage import database, queries
from tests.support.confirmation_world import (
    BASELINE,
    LUCKY_16,
    TRUTH,
    confirmation_round,
    enqueued,
)
from tests.support.confirmation_world import (
    world as noisy_world,
)
from tests.support.paths import FIXTURES
from tests.support.scripted_executor import ScriptedExecutor
from tests.support.study_loop import Recorder, rows, runner

SCENARIO = FIXTURES / "scenarios" / "loop_confirm.yaml"


def study(tmp_path, script, *, scenario=SCENARIO, confirm_runs=None, executor=None):
    executor, events = executor or ScriptedExecutor(script=script), Recorder()
    r = enqueued(runner(tmp_path, executor, scenario=scenario, confirm_runs=confirm_runs, observers=[events]))
    return r, executor, events


def trial_of(r, max_num_seqs) -> int:
    return next(
        row.trial_number for row in rows(r) if row.config.get("max_num_seqs") == max_num_seqs and not row.baseline
    )


def confirmation_runs(r):
    with Session(database.open_db(r.prep.storage_url)) as s:
        return queries.confirmation_runs(s, queries.require_study(s, "loop"))


def test_confirmation_picks_the_truly_better_config_over_a_lucky_single_measurement(tmp_path):
    r, _executor, events = study(tmp_path, noisy_world(TRUTH, LUCKY_16))
    result = r.run()
    lucky, better = trial_of(r, 16), trial_of(r, 8)
    assert r.chosen().number == lucky  # the search alone would deploy the outlier
    verdict = result.verdict
    assert verdict.outcome == Outcome.RECOMMEND
    assert result.chosen == better and verdict.recommended.trial_number == better
    assert [c.trial_number for c in verdict.candidates] == [
        lucky,
        better,
        BASELINE,
    ]  # the front's first two, the baseline
    by_trial = {c.trial_number: c for c in verdict.candidates}
    assert by_trial[lucky].metrics["ttft_p95_ms"].value == pytest.approx(700.0)
    against_defaults = verdict.comparison(better, BASELINE)
    assert against_defaults.calls == {"ttft_p95_ms": "win", "output_throughput": "equal"}  # the same, within 5%
    assert against_defaults.diffs["ttft_p95_ms"].value == pytest.approx(-0.4)
    assert verdict.ties == []  # 600 vs 700 with 2% drift: apart beyond the noise
    assert events.names.count("confirmation_run_recorded") == 9 and "confirmation_finished" in events.names


def test_rounds_are_interleaved_and_each_run_is_stored_with_its_round(tmp_path):
    r, executor, _ = study(tmp_path, noisy_world(TRUTH, LUCKY_16))
    r.run()
    confirms = [p for p in executor.plans if p.run_name]
    order = [p.number for p in confirms]
    lucky, better = trial_of(r, 16), trial_of(r, 8)
    assert order == [lucky, better, BASELINE] * 3  # A B C A B C A B C, not A A A B B B
    assert [p.run_name for p in confirms[:3]] == [f"confirm-r1-trial-{n:04d}" for n in (lucky, better, BASELINE)]
    stored = confirmation_runs(r)
    assert [(s.trial_number, s.round) for s in stored] == [(n, k) for k in range(3) for n in (lucky, better, BASELINE)]
    assert all(s.status == "ok" and s.constraints["server_ok"] == -1.0 for s in stored)


def test_an_interrupted_phase_resumes_with_the_runs_it_lacks(tmp_path):
    calls = []

    def interrupt_fifth_confirmation(plan):
        if plan.run_name:
            calls.append(plan.number)
            if len(calls) == 5:
                raise KeyboardInterrupt

    executor = ScriptedExecutor(script=noisy_world(TRUTH, LUCKY_16), before=interrupt_fifth_confirmation)
    with pytest.raises(KeyboardInterrupt):
        study(tmp_path, None, executor=executor)[0].run()
    assert len(confirmation_runs(runner(tmp_path, ScriptedExecutor(), scenario=SCENARIO))) == 4

    r, again, _ = study(tmp_path, noisy_world(TRUTH, LUCKY_16))
    result = r.run()
    lucky, better = trial_of(r, 16), trial_of(r, 8)
    # no search trial again; the interrupted fifth run (round 2's second) and the four after it
    assert [p.number for p in again.plans] == [better, BASELINE, lucky, better, BASELINE]
    assert len(confirmation_runs(r)) == 9
    assert result.verdict.outcome == Outcome.RECOMMEND and result.chosen == better


def test_nothing_beats_the_baseline_beyond_the_noise_so_it_is_kept(tmp_path):
    level = {None: 1000.0, 4: 1000.0, 8: 1000.0, 16: 1000.0}
    r, _, _ = study(tmp_path, noisy_world(level, {16: 400.0, 8: 600.0}))
    result = r.run()
    verdict = result.verdict
    assert verdict.outcome == Outcome.KEEP_BASELINE
    assert result.chosen == BASELINE and verdict.recommended.baseline == "vllm_defaults"
    # the rule's first pick and the others are ties of each other, and of the baseline
    assert {c.trial_number for c in [verdict.top, *verdict.ties]} == {trial_of(r, 16), trial_of(r, 8), BASELINE}


def test_a_candidate_that_misses_the_slo_in_confirmation_loses_its_feasibility(tmp_path):
    truth = {**TRUTH, 16: 2500.0}  # the SLO: ttft_p95_ms <= 2000
    r, _, _ = study(tmp_path, noisy_world(truth, LUCKY_16))
    verdict = r.run().verdict
    lucky = next(c for c in verdict.candidates if c.trial_number == trial_of(r, 16))
    assert not lucky.feasible
    assert lucky.worst_slo == ("ttft_p95_ms<=2000", pytest.approx(0.25))
    assert verdict.recommended.trial_number == trial_of(r, 8)


def test_the_noise_of_each_objective_is_stored_with_the_study(tmp_path):
    r, _, _ = study(tmp_path, noisy_world(TRUTH, LUCKY_16))
    r.run()
    with Session(database.open_db(r.prep.storage_url)) as s:
        noise = queries.require_study(s, "loop").noise
    assert noise["ttft_p95_ms"] == pytest.approx(0.02) and noise["output_throughput"] == pytest.approx(0.02)


def test_the_search_screens_short_and_confirmation_measures_in_full(tmp_path):
    text = SCENARIO.read_text() + "screening: {num_requests: 4}\n"
    (tmp_path / "screened.yaml").write_text(text)
    r, executor, _ = study(tmp_path, noisy_world(TRUTH, LUCKY_16), scenario=tmp_path / "screened.yaml", confirm_runs=1)
    r.run()
    sizes = [(bool(p.run_name), m.workload.num_requests) for p, m in zip(executor.plans, executor.measured_with)]
    # full: 40 requests, lengthened to 100 since one run must put 5 above the p95 (pooled_plan)
    assert sizes == [(False, 4)] * 4 + [(True, 100)] * 3


def test_confirmation_looks_for_the_capacity_where_the_search_bracketed_it(tmp_path):
    """Each confirmation run's capacity search starts from its trial's stored bracket (it is
    measured afresh; the hint saves the stages that would find the bracket again)."""
    measured = noisy_world(TRUTH, LUCKY_16)

    def bracket(config) -> tuple[float, float]:
        return 1.0 + (config.get("max_num_seqs") or 0) / 100, 1.2 + (config.get("max_num_seqs") or 0) / 100

    def script(plan):
        outcome = measured(plan)
        low, high = bracket(plan.config)
        outcome.capacity = CapacityEstimate(low, low, high, 3, "")
        return outcome

    r, executor, _ = study(tmp_path, script, confirm_runs=1)
    r.run()
    confirmed = [p for p in executor.plans if p.run_name]
    assert confirmed and all(p.capacity_hint == bracket(p.config) for p in confirmed)
    assert all(p.capacity_hint == () for p in executor.plans if not p.run_name)


def test_later_rounds_look_where_the_last_confirmation_run_bracketed_the_capacity(tmp_path):
    """Round 1 starts from the search's (screened) bracket; round 2 from the bracket its own
    round-1 run found with the full measurement, which can differ from the screen's."""
    measured = noisy_world(TRUTH, LUCKY_16)

    def bracket(plan, confirming: bool) -> tuple[float, float]:
        x = (plan.config.get("max_num_seqs") or 0) / 100 + (1.0 if confirming else 0.0)
        return 1.0 + x, 1.2 + x

    def script(plan):
        outcome = measured(plan)
        low, high = bracket(plan, confirming=bool(plan.run_name))
        outcome.capacity = CapacityEstimate(low, low, high, 3, "")
        return outcome

    r, executor, _ = study(tmp_path, script, confirm_runs=2)
    r.run()
    confirmed = [p for p in executor.plans if p.run_name]
    first = [p for p in confirmed if p.run_name.startswith("confirm-r1-")]
    second = [p for p in confirmed if p.run_name.startswith("confirm-r2-")]
    assert first and len(second) == len(first)
    assert all(p.capacity_hint == bracket(p, confirming=False) for p in first)
    assert all(p.capacity_hint == bracket(p, confirming=True) for p in second)


def _bracketed_world(plan):
    """The noisy world, each run's capacity bracketed at [1 + seqs/100, 1.2 + seqs/100] req/s."""
    outcome = noisy_world(TRUTH, LUCKY_16)(plan)
    low = 1.0 + (plan.config.get("max_num_seqs") or 0) / 100
    outcome.capacity = CapacityEstimate(low, low, low + 0.2, 3, "")
    return outcome


def test_a_baselines_capacity_search_stops_where_every_confirmed_candidate_beats_it(tmp_path):
    """Each run of the baseline is told the rate below which its comparison is decided: the least
    met rate of the other candidates' confirmation runs so far (1.08 and 1.16 req/s), over 1 plus
    the capacity's practical threshold (5%). The candidates' own runs search in full, and
    `baseline_search: full` searches the baseline in full too."""
    r, executor, events = study(tmp_path, _bracketed_world, confirm_runs=2)
    r.run()
    confirmed = [p for p in executor.plans if p.run_name]
    assert [p.beaten_at for p in confirmed if p.baseline is None] == [None] * 4
    assert [p.beaten_at for p in confirmed if p.baseline] == [pytest.approx(1.08 / 1.05)] * 2
    assert all(p.beaten_at is None for p in executor.plans if not p.run_name)  # the search: no such stop
    started = next(e for name, e in events.events if name == "confirmation_started")
    assert any(n.startswith("a baseline's capacity search stops once it misses") for n in started.notes)

    text = SCENARIO.read_text().replace("confirmation: {runs: 3, front: 2}", "")
    (tmp_path / "full.yaml").write_text(text + "confirmation: {runs: 3, front: 2, baseline_search: full}\n")
    r, executor, _ = study(tmp_path / "full", _bracketed_world, scenario=tmp_path / "full.yaml", confirm_runs=1)
    r.run()
    assert [p.beaten_at for p in executor.plans] == [None] * len(executor.plans)


def test_a_baseline_is_stopped_only_against_candidates_whose_comparison_is_decided():
    """`beaten_at` on stored runs: the least of the other candidates' lowest met rates, over
    1 + the threshold; a candidate with a failed run drops out (it loses its feasibility); one
    whose runs met no rate leaves nothing decided."""
    from types import SimpleNamespace

    from search.study.baseline_stop import beaten_at
    from search.study.candidates import Candidate
    from storage.tables import TrialStatus

    def run(n, status="ok", low=None):
        return SimpleNamespace(trial_number=n, status=status, capacity={"rps": low or 0.0, "low": low, "high": 9.0})

    base, a, b = Candidate(0, "vllm_defaults", {}, {}), Candidate(2, None, {}, {}), Candidate(3, None, {}, {})
    cands = [a, b, base]
    runs = [run(2, low=2.0), run(2, low=1.6), run(3, low=3.0)]
    assert beaten_at(base, cands, runs, 0.05) == pytest.approx(1.6 / 1.05)
    assert beaten_at(a, cands, runs, 0.05) is None  # not a baseline: searched in full
    assert beaten_at(base, cands, [*runs, run(3, TrialStatus.FAILED.value)], 0.05) == pytest.approx(1.6 / 1.05)
    assert beaten_at(base, cands, [run(2, low=2.0), run(3)], 0.05) is None  # trial 3 met no rate
    assert beaten_at(base, cands, [run(2, low=2.0)], 0.05) is None  # trial 3 not measured yet


def test_a_baseline_that_dominates_the_search_is_confirmed_against_the_best_of_the_rest(tmp_path):
    lucky_defaults = noisy_world(TRUTH, {None: 100.0}, search_throughput={None: 200.0})
    r, _, _ = study(tmp_path, lucky_defaults)
    result = r.run()
    assert [t.number for t in r.study.best_trials] == [BASELINE]  # the front is the baseline alone
    assert [c.trial_number for c in result.verdict.candidates] == [trial_of(r, 8), trial_of(r, 16), BASELINE]
    assert result.verdict.outcome == Outcome.RECOMMEND and result.chosen == trial_of(r, 8)


def test_with_nothing_feasible_in_the_search_the_closest_miss_is_confirmed_and_a_far_one_is_not(tmp_path):
    """The search's screen missed the 2000 ms bound with every sampled config: 8 by 5%, within
    what one screen settles, so it is confirmed against the baseline (and meets the bound there);
    4 and 16 by 50%, so they are not."""
    screened = {16: 3000.0, 8: 2100.0, 4: 3000.0}
    r, _, _events = study(tmp_path, noisy_world(TRUTH, screened))
    result = r.run()
    assert [c.trial_number for c in result.verdict.candidates] == [trial_of(r, 8), BASELINE]
    with Session(database.open_db(r.prep.storage_url)) as s:
        notes = queries.require_study(s, "loop").confirmation["notes"]
    assert any("confirming the closest" in n and f"trial {trial_of(r, 8)} (missed by 5.0%)" in n for n in notes)
    assert result.verdict.outcome == Outcome.RECOMMEND and result.chosen == trial_of(r, 8)


def test_with_every_sampled_config_far_from_the_slos_the_confirmation_is_skipped(tmp_path):
    r, executor, events = study(tmp_path, noisy_world(TRUTH, {16: 3000.0, 8: 3000.0, 4: 3000.0}))
    result = r.run()
    assert result.verdict is None and not any(p.run_name for p in executor.plans)
    assert any("confirmation skipped" in n for n in events.notes)


def test_confirm_runs_zero_skips_the_phase(tmp_path):
    r, executor, _events = study(tmp_path, noisy_world(TRUTH, LUCKY_16), confirm_runs=0)
    result = r.run()
    assert result.verdict is None and not any(p.run_name for p in executor.plans)
    assert result.chosen == trial_of(r, 16)


@dataclass
class Run:  # a stored confirmation run, as the verdict reads one
    trial_number: int
    round: int
    constraints: dict
    baseline: str | None = None
    status: str = "ok"
    metrics: dict = field(default_factory=lambda: {"ttft_p95_ms": 3000.0, "output_throughput": 50.0})
    failure_class: str | None = None
    failure_line: str | None = None
    capacity: dict | None = None
    stages: list = field(default_factory=list)


def test_the_closest_candidate_is_judged_on_its_graded_slos_not_on_pass_fail_ones():
    from search.scenario import load

    sc, _, _ = load(SCENARIO)
    aborted = {"target_completed": 1.0, "server_ok": -1.0}
    runs = [Run(0, k, {"ttft_p95_ms<=2000": 0.5, **aborted}) for k in range(2)] + [
        Run(1, k, {"ttft_p95_ms<=2000": 0.2, **aborted}) for k in range(2)
    ]
    verdict = decide(runs, sc, [0, 1], runs_per_candidate=2)
    assert verdict.outcome == Outcome.NONE_FEASIBLE
    assert verdict.closest.trial_number == 1 and verdict.closest.worst_slo == ("ttft_p95_ms<=2000", 0.2)


def lagging(script, max_num_seqs: set, in_round: int):
    """The world, with the load client behind its schedule in one confirmation round of these
    configurations (None: the baseline)."""

    def wrapped(plan):
        out = script(plan)
        if plan.config.get("max_num_seqs") in max_num_seqs and confirmation_round(plan) == in_round:
            out.metrics[CLIENT_BEHIND] = 1.0
        return out

    return wrapped


def test_a_candidate_whose_load_client_fell_behind_is_not_recommended_over_one_measured_right(tmp_path):
    r, _, _ = study(tmp_path, lagging(noisy_world(TRUTH, LUCKY_16), {8}, in_round=1))
    verdict = r.run().verdict
    lucky, better = trial_of(r, 16), trial_of(r, 8)
    by_trial = {c.trial_number: c for c in verdict.candidates}
    assert by_trial[better].behind == [2] and by_trial[better].feasible and by_trial[better].rank is None
    assert verdict.outcome == Outcome.RECOMMEND and verdict.recommended.trial_number == lucky  # 700 ms, measured right
    text = verdict_text.describe(verdict, r.sc)
    assert verdict_headline.SUSPECT.startswith(
        "its load client fell behind its schedule, so the server got less load than planned and its numbers are suspect"
    )
    assert (
        f"warning: trial {better}: in round 2 {verdict_headline.SUSPECT}; not considered for the recommendation"
        in text.lines()
    )
    assert "warning" not in text.headline


def test_when_every_candidate_lagged_the_verdict_recommends_with_a_warning(tmp_path):
    r, _, _ = study(tmp_path, lagging(noisy_world(TRUTH, LUCKY_16), {4, 8, 16, None}, in_round=0))
    verdict = r.run().verdict
    better = trial_of(r, 8)
    assert verdict.recommended.trial_number == better  # nothing measured right to prefer: the rule's pick
    assert verdict_headline.headline(verdict, r.sc).endswith(
        f"; warning: trial {better} was chosen although {verdict_headline.SUSPECT}; every alternative was measured so too"
    )


def test_each_confirmation_run_says_what_the_runs_still_to_do_will_take(tmp_path):
    r, _executor, events = study(tmp_path, noisy_world(TRUTH, LUCKY_16))
    r.run()
    # This world's trials store no times, so nothing plans a run: a candidate's pace is known
    # once one of its runs is measured, and the rest of the phase once every candidate's is.
    said = [e.ahead for name, e in events.events if name == "confirmation_run_recorded"]
    assert [x.split(",")[0] if x else x for x in said] == [
        None,
        None,
        *(f"confirmation: {n} runs to go" for n in range(6, 1, -1)),
        "confirmation: 1 run to go",
        None,
    ]


def test_a_confirmation_given_more_runs_paces_them_by_the_runs_each_candidate_already_took(tmp_path):
    """One round stored (the pick 300 s, max_num_seqs 8 600 s, the defaults 900 s), then the same
    study confirmed with 3 runs a candidate: its two rounds to go are planned at those times."""
    import dataclasses

    from search.executor import Timings

    took = {16: 300.0, 8: 600.0, None: 900.0}
    base = noisy_world(TRUTH, LUCKY_16)

    def timed(plan):
        outcome = base(plan)
        seconds = took[plan.config.get("max_num_seqs")] if plan.run_name else 100.0
        return dataclasses.replace(outcome, timings=Timings(total_s=seconds))

    study(tmp_path, timed, confirm_runs=1)[0].run()
    r, _executor, events = study(tmp_path, timed, confirm_runs=3)
    r.run()
    started = next(e for name, e in events.events if name == "confirmation_started")
    assert started.remaining == 6 and started.estimate_s == pytest.approx(2 * (300 + 600 + 900))
    # The study's plan, said before the phase, counts the 6 runs to do, not all 9, each at the
    # mean of the 3 stored (600 s), as the phase then paces them: not at the model's length.
    notes = [str(x) for name, x in events.events if name == "note"]
    plans = [x for x in notes if x.startswith("plan: ")]
    assert plans and "the confirmation (6 runs, about 60 min)" in plans[-1], plans
    assert "a confirmation run of this study took 10.0 min on average over the 3 stored" in "\n".join(notes)
    # At its end the phase holds its estimate to account (scripted runs take no time here).
    assert "the confirmation said about 60 min for its 6 runs; it took 0 min (-100%)" in notes
