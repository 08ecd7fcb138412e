"""The price a study quotes its costs at: `autotune search --usd-per-hour` over the scenario's
`cost.usd_per_hour`, kept with the study; a price that is not a positive number is refused."""

import optuna
import pytest

import search.prepare
import search.study.loop
from app.cli import main
from search.scenario import Cost, load
from search.study.attributes import keep_price
from search.study.price import FROM_FLAG, FROM_SCENARIO, Price, study_price
from tests.support.fakes import ctx
from tests.support.paths import FIXTURES
from tests.support.scripted_executor import ScriptedExecutor
from tests.support.study_loop import LOOP_SCENARIO

UNPRICED, _, _ = load(FIXTURES / "scenarios" / "loop_capacity.yaml")
PRICED = UNPRICED.model_copy(update={"cost": Cost(usd_per_hour=3.5)})


def test_a_runs_price_wins_over_the_scenarios_and_without_either_there_is_none():
    assert study_price(PRICED, {}) == Price(3.5, FROM_SCENARIO)
    assert study_price(PRICED, {"usd_per_hour": 7.0}) == Price(7.0, FROM_FLAG)
    assert study_price(UNPRICED, {"usd_per_hour": 7.0}) == Price(7.0, FROM_FLAG)
    assert study_price(UNPRICED, {}) is None


def test_a_run_without_the_flag_keeps_the_price_an_earlier_run_kept():
    study = optuna.create_study()
    keep_price(study, None)
    assert study.user_attrs == {}
    keep_price(study, 2.5)
    keep_price(study, None)
    assert study_price(UNPRICED, study.user_attrs) == Price(2.5, FROM_FLAG)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "cheap"])
def test_a_price_that_is_not_a_positive_number_is_refused_before_anything_runs(value, capsys):
    with pytest.raises(SystemExit) as e:
        main(["search", str(LOOP_SCENARIO), "--usd-per-hour", value])
    assert e.value.code == 2
    assert f"argument --usd-per-hour: must be a number > 0, got '{value}'" in capsys.readouterr().err


def test_the_command_line_price_reaches_the_summary(tmp_path, monkeypatch, capsys):
    executor = ScriptedExecutor()
    monkeypatch.setattr(search.prepare, "launch_context", lambda model=None: ctx())
    monkeypatch.setattr(search.study.loop, "vllm_executor", lambda prep: executor.factory)
    storage = f"sqlite:///{tmp_path / 'cli.db'}"
    args = ["search", str(LOOP_SCENARIO), "--trials", "1", "--storage", storage, "--runs-dir", str(tmp_path)]
    assert main([*args, "--confirm-runs", "0", "--usd-per-hour", "2.5"]) == 0
    # loop.yaml is a closed loop, priced at its confirmed throughput: with no confirmation, the
    # summary says so instead of a cost, and names the command that confirms it.
    assert (
        "cost at $2.5 an hour (--usd-per-hour): quoted from the confirmed throughput; "
        "`autotune confirm loop --study loop` confirms it"
    ) in capsys.readouterr().out
    assert optuna.load_study(study_name="loop", storage=storage).user_attrs["usd_per_hour"] == 2.5
