"""--warm-start: an earlier study as prior knowledge. Refused from another model, machine or vLLM
build (before anything runs); from a matching one, its winner is enqueued and measured again and
its trials inform TPE without becoming trials of the new study. Scripted executor, no vLLM."""

import dataclasses
import html
import re
from pathlib import Path

import optuna
import pytest

from app.outputs import write_report
from search import space as space_mod
from search.prepare import StudyOptions, prepare
from search.proposals import PriorSampler
from search.study import StudyMismatch, StudyRunner
from search.study.warm_start import WARM_START_ATTR
from tests.support.fakes import H100, MODEL, ctx
from tests.support.scripted_executor import ScriptedExecutor, measured
from tests.support.study_loop import LOOP_SCENARIO, Recorder, optuna_trials, rows


def study(
    tmp_path: Path,
    name: str,
    executor: ScriptedExecutor,
    trials: int,
    *,
    warm_start: str | None = None,
    launch_ctx=None,
    confirm_runs: int = 0,
    observers=(),
    scenario: Path = LOOP_SCENARIO,
) -> StudyRunner:
    opts = StudyOptions(
        scenario=str(scenario),
        trials=trials,
        storage=f"sqlite:///{tmp_path / 'loop.db'}",
        study_name=name,
        runs_dir=tmp_path,
        confirm_runs=confirm_runs,
        warm_start=warm_start,
    )
    return StudyRunner(prepare(opts, ctx=launch_ctx or ctx()), opts, observers=observers, executor=executor.factory)


@pytest.fixture
def earlier(tmp_path) -> StudyRunner:
    r = study(tmp_path, "earlier", ScriptedExecutor(), trials=6, confirm_runs=2)
    r.run()
    return r


@pytest.mark.parametrize(
    "elsewhere, said",
    [
        (ctx(version="0.33.0"), "vLLM was vllm 0.32.0, now vllm 0.33.0"),
        (ctx(hw=H100), "hardware was CPU test, 2 cores, 24 GiB RAM, now 1x NVIDIA H100 80GB HBM3"),
        (dataclasses.replace(ctx(), model=dataclasses.replace(MODEL, path=Path("/other"))), "model was /m, now /other"),
    ],
)
def test_a_warm_start_from_another_build_machine_or_model_is_refused_saying_what_differs(
    tmp_path, earlier, elsewhere, said
):
    executor = ScriptedExecutor()
    with pytest.raises(StudyMismatch, match=re.escape(f"--warm-start earlier: it was measured elsewhere ({said})")):
        study(tmp_path, "new", executor, trials=3, warm_start="earlier", launch_ctx=elsewhere).run()
    assert executor.plans == []


def test_a_warm_start_from_a_study_that_does_not_exist_or_scored_other_objectives_is_refused(tmp_path, earlier):
    with pytest.raises(StudyMismatch, match="--warm-start nope: no study of that name"):
        study(tmp_path, "new", ScriptedExecutor(), trials=3, warm_start="nope")
    with pytest.raises(StudyMismatch, match="--warm-start nope: no study of that name"):  # nor a database
        study(tmp_path / "empty", "new", ScriptedExecutor(), trials=3, warm_start="nope")
    assert not (tmp_path / "empty" / "loop.db").exists()
    other = tmp_path / "other.yaml"
    other.write_text(LOOP_SCENARIO.read_text().replace("direction: maximize", "direction: minimize"))
    with pytest.raises(StudyMismatch, match=r"--warm-start earlier: it scored other objectives"):
        study(tmp_path, "new", ScriptedExecutor(), trials=3, warm_start="earlier", scenario=other)


def test_a_matching_warm_start_enqueues_the_confirmed_winner_and_measures_everything_again(tmp_path, earlier):
    winner = earlier.run().verdict.recommended  # resumed: nothing left to run, the stored verdict
    assert winner is not None and winner.baseline is None
    winner_params = optuna_trials(earlier)[winner.trial_number].params
    executor, events = ScriptedExecutor(), Recorder()
    r = study(tmp_path, "new", executor, trials=3, warm_start="earlier", observers=[events])
    r.run()
    told, stored = optuna_trials(r), rows(r)
    [warm] = [t for t in told if WARM_START_ATTR in t.user_attrs]
    assert warm.params == winner_params
    assert warm.user_attrs[WARM_START_ATTR] == f"the confirmed winner of study 'earlier' (trial {winner.trial_number})"
    # nothing copied: the new study holds its own 3 trials, each measured by its own executor
    assert len(told) == len(stored) == len(executor.plans) == 3
    assert [p.params for p in executor.plans][1] == winner_params
    assert all(row.status == "ok" and row.duplicate_of is None for row in stored)
    # the earlier sampled trials inform TPE, in a view the new study's storage never sees
    earlier_sampled = [t for t in optuna_trials(earlier) if "baseline" not in t.user_attrs]
    assert isinstance(r.study.sampler, PriorSampler) and r.study.sampler.prior == len(earlier_sampled)
    assert any(
        n.startswith("warm start from study 'earlier': the confirmed winner")
        and f"{len(earlier_sampled)} of its trials inform the sampler" in n
        for n in events.notes
    )
    assert any(
        e.label == f"trial 1 (the confirmed winner of study 'earlier' (trial {winner.trial_number}))"
        for name, e in events.events
        if name == "trial_started"
    )
    report = write_report(r.prep.storage_url, "new", tmp_path / "report.html").read_text()
    assert html.escape(f"the confirmed winner of study 'earlier' (trial {winner.trial_number})") in report


def slow_baseline(plan):
    """`measured`, with a baseline that misses the TTFT SLO: the best feasible trial is a sampled one."""
    outcome = measured(plan)
    if plan.baseline:
        outcome.metrics["ttft_p95_ms"] = 3000.0
    return outcome


def test_without_a_confirmation_the_best_feasible_trial_is_enqueued_once(tmp_path):
    first = study(tmp_path, "earlier", ScriptedExecutor(script=slow_baseline), trials=4)
    first.run()
    best = first.chosen()
    r = study(tmp_path, "new", ScriptedExecutor(), trials=2, warm_start="earlier")
    r.run()
    again = study(tmp_path, "new", ScriptedExecutor(), trials=3, warm_start="earlier")
    again.run()  # a resume enqueues nothing more
    [warm] = [t for t in optuna_trials(again) if WARM_START_ATTR in t.user_attrs]
    assert best.user_attrs.get("baseline") is None and warm.params == best.params
    assert warm.user_attrs[WARM_START_ATTR] == (
        f"the best feasible trial (not confirmed) of study 'earlier' (trial {best.number})"
    )


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_the_prior_makes_tpe_model_guided_from_the_first_sampled_trial(tmp_path):
    """TPE's random startup counts the prior's trials: a cold TPE's first proposal is its random
    sampler's draw; with the earlier study's 7 sampled trials behind it, it is fitted on them."""
    study(tmp_path, "earlier", ScriptedExecutor(), trials=8).run()
    (tmp_path / "cold").mkdir()
    first = []
    for r in (
        study(tmp_path / "cold", "cold", ScriptedExecutor(), trials=1),
        study(tmp_path, "new", ScriptedExecutor(), trials=1, warm_start="earlier"),
    ):
        first.append(space_mod.suggest(r.study.ask(), r.prep.dists))
    random = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    assert first[0] == space_mod.suggest(random.ask(), r.prep.dists)
    assert first[1] != first[0]
    assert len(optuna_trials(r)) == 1  # the prior is not stored in the new study


def test_a_baseline_that_won_is_not_enqueued_again(tmp_path):
    study(tmp_path, "earlier", ScriptedExecutor(), trials=4).run()  # the baseline is the best feasible trial here
    events = Recorder()
    r = study(tmp_path, "new", ScriptedExecutor(), trials=2, warm_start="earlier", observers=[events])
    r.run()
    assert not any(WARM_START_ATTR in t.user_attrs for t in optuna_trials(r))
    assert (
        "warm start: the best feasible trial (not confirmed) of study 'earlier' (trial 0) is its baseline "
        "vllm_defaults, measured here as a baseline again"
    ) in events.notes


def test_the_cli_refuses_a_warm_start_from_elsewhere_in_one_line_with_exit_2_and_starts_nothing(
    tmp_path, monkeypatch, capsys
):
    import search.prepare
    import search.study.loop
    from app.cli import main

    storage = f"sqlite:///{tmp_path / 'cli.db'}"
    args = ["search", str(LOOP_SCENARIO), "--trials", "1", "--storage", storage, "--runs-dir", str(tmp_path)]
    executor = ScriptedExecutor()
    monkeypatch.setattr(search.study.loop, "vllm_executor", lambda prep: executor.factory)
    monkeypatch.setattr(search.prepare, "launch_context", lambda model=None: ctx())
    assert main([*args, "--study", "earlier"]) == 0
    monkeypatch.setattr(search.prepare, "launch_context", lambda model=None: ctx(hw=H100))
    capsys.readouterr()
    assert main([*args, "--study", "new", "--warm-start", "earlier"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("autotune: error: --warm-start earlier: it was measured elsewhere (hardware was CPU test")
    assert err.count("\n") == 1 and len(executor.plans) == 1
    assert main([*args, "--study", "new", "--warm-start", "earlier", "--workers", "2"]) == 2
    assert "--warm-start runs in one process" in capsys.readouterr().err
