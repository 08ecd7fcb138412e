"""With a price, the outputs quote what serving costs at the confirmed capacity under the SLO: the
verdict lines of the terminal summary, best.yaml's header and the report, in the same words and
numbers; without one, nothing changes. Studies the real loop ran on a scripted executor.

tests/fixtures/scenarios/loop_capacity.yaml: TTFT at the target load against capacity under the
SLO; `staged` scripts each trial's target stage and capacity search (16 output tokens a request).
Trial 0 is the vllm_defaults baseline, trial 1 the starved baseline (capacity 0).
"""

import html

import pytest
import yaml
from sqlalchemy.orm import Session

from app.outputs import export_study, load_study, write_report
from app.outputs.format import fmt_cost_ratio, fmt_usd
from app.outputs.summary import verdict_lines
from objectives import statistics as st
from objectives.capacity import SLO_CAPACITY_RPS
from objectives.serving_cost import CostInterval, usd_per_million
from storage import database
from tests.support.confirmation_world import TRUTH, enqueued, world
from tests.support.paths import FIXTURES
from tests.support.scripted_executor import ScriptedExecutor, staged
from tests.support.study_loop import runner

SCENARIO = FIXTURES / "scenarios" / "loop_capacity.yaml"
TOKENS = 16  # output tokens a request in `staged`'s stages


def priced(tmp_path, usd_per_hour: float):
    doc = yaml.safe_load(SCENARIO.read_text())
    doc["cost"] = {"usd_per_hour": usd_per_hour}
    path = tmp_path / "loop_capacity.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run_study(tmp_path, scenario, usd_per_hour=None) -> str:
    """Runs (or resumes, with the same arguments) the study: 5 trials, 2 confirmation runs each."""
    executor = ScriptedExecutor()
    executor.script = staged(executor)
    r = runner(tmp_path, executor, scenario=scenario, trials=5, confirm_runs=2, usd_per_hour=usd_per_hour)
    r.run()
    return r.prep.storage_url


def outputs(url, out_dir):
    """(the summary's verdict lines, best.yaml, report.html, the loaded study)."""
    with Session(database.open_db(url), expire_on_commit=False) as session:
        ls = load_study(session, url, "loop")
        lines = verdict_lines(ls)
        best = export_study(session, url, "loop", out_dir).best.path.read_text()
    report = write_report(url, "loop", out_dir / "report.html").read_text()
    return lines, best, report, ls


def is_cost(line: str) -> bool:
    return "per million" in line or line.startswith(("cost at", "  vllm_defaults (trial 0): ", "  starved (trial 1): "))


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("priced")
    return outputs(run_study(tmp, priced(tmp, 3.5)), tmp)


def test_the_verdict_lines_best_yaml_and_the_report_quote_one_cost(study):
    lines, best, report, ls = study
    [headline] = [x for x in lines if x.startswith("cost at $3.5")]
    deployed = ls.verdict.recommended
    assert headline.startswith(f"cost at $3.5 an hour (the scenario's cost.usd_per_hour): {deployed.label}: $")
    title = (
        "cost at the confirmed capacity under the SLO, at $3.5 an hour (the scenario's cost.usd_per_hour), "
        f"{TOKENS} output tokens a request (measured at the capacity):"
    )
    defaults = next(x for x in lines if x.startswith("  vllm_defaults (trial 0): $"))
    assert "per million output tokens" in defaults and "vLLM defaults' cost" not in defaults
    starved = "  starved (trial 1): no cost: capacity 0, it met the SLOs at no rate tried"
    assert {title, starved} <= set(lines)
    for line in (headline, title, defaults, starved):
        assert f"# {line}\n" in best
        assert html.escape(line.strip().rstrip(":")) in report


def test_the_cost_is_the_price_over_the_confirmed_capacity_and_its_ratio_the_capacity_ratio_inverted(study):
    lines, _, _, ls = study
    v = ls.verdict
    deployed, defaults = v.recommended, next(c for c in v.candidates if c.baseline == "vllm_defaults")
    cap = deployed.metrics[SLO_CAPACITY_RPS]  # an objective of the scenario: the verdict's own interval
    assert cap.n == 4 and not cap.at_least and 0 < cap.low < cap.high
    usd_per_s = 3.5 / 3600
    per_request = CostInterval(usd_per_s / cap.value * 1e6, usd_per_s / cap.high * 1e6, usd_per_s / cap.low * 1e6, 4)
    per_token = CostInterval(*(x / TOKENS for x in (per_request.value, per_request.low, per_request.high)), 4)
    ratio = st.ratio(v.comparison(deployed.trial_number, defaults.trial_number).diffs[SLO_CAPACITY_RPS])
    against = CostInterval(1 / ratio.value, 1 / ratio.high, 1 / ratio.low, ratio.n)
    assert (
        f"cost at $3.5 an hour (the scenario's cost.usd_per_hour): {deployed.label}: {fmt_usd(per_token)} per "
        f"million output tokens, {fmt_usd(per_request)} per million requests; {fmt_cost_ratio(against)} vLLM "
        f"defaults' cost"
    ) in lines


def test_without_a_price_nothing_changes_and_a_later_usd_per_hour_adds_only_the_cost(tmp_path):
    url = run_study(tmp_path, SCENARIO)
    lines, best, report, _ = outputs(url, tmp_path)
    assert not [x for x in lines if is_cost(x)] and "per million" not in best + report

    run_study(tmp_path, SCENARIO, usd_per_hour=2.0)  # the finished study resumed: only the price changes
    priced_lines, priced_best, priced_report, _ = outputs(url, tmp_path)
    assert [x for x in priced_lines if not is_cost(x)] == lines
    assert [x for x in priced_best.splitlines() if not is_cost(x.removeprefix("# "))] == best.splitlines()
    assert any(x.startswith("cost at $2 an hour (--usd-per-hour): trial ") for x in priced_lines)
    assert "cost at $2 an hour (--usd-per-hour): trial " in priced_best and "per million requests" in priced_report

    run_study(tmp_path, SCENARIO)  # a later run without the flag keeps the study's price
    assert outputs(url, tmp_path)[0] == priced_lines


def test_a_closed_loop_without_a_capacity_search_is_priced_at_its_confirmed_throughput(tmp_path):
    """A batch job (closed loop, no capacity: section) with a price: each confirmed candidate's
    cost at its confirmed output and request throughput (median of 3 runs, with its interval),
    in the verdict lines and best.yaml's header; its ratio to vLLM's defaults' the inverse of
    the throughput ratio. tests/support/confirmation_world.py: every configuration serves 98, 100
    and 102 output tokens/s over its three rounds, 16 tokens a request."""
    doc = yaml.safe_load((FIXTURES / "scenarios" / "loop_confirm.yaml").read_text())
    doc["cost"] = {"usd_per_hour": 3.5}
    scenario = tmp_path / "loop_confirm.yaml"
    scenario.write_text(yaml.safe_dump(doc, sort_keys=False))
    r = runner(tmp_path, ScriptedExecutor(script=world(TRUTH)), scenario=scenario, confirm_runs=None)
    enqueued(r).run()
    lines, best, _, ls = outputs(r.prep.storage_url, tmp_path)

    throughput = st.median_interval([98.0, 100.0, 102.0])
    per_token = usd_per_million(3.5, throughput)
    per_request = usd_per_million(3.5, st.median_interval([98.0 / 16, 100.0 / 16, 102.0 / 16]))
    deployed = ls.verdict.recommended
    expected = (
        f"cost at $3.5 an hour (the scenario's cost.usd_per_hour): {deployed.label}: {fmt_usd(per_token)} per "
        f"million output tokens, {fmt_usd(per_request)} per million requests; "
    )
    [headline] = [x for x in lines if x.startswith("cost at $3.5")]
    assert headline.startswith(expected) and headline.endswith("vLLM defaults' cost")
    assert (
        "cost at the confirmed throughput (a closed loop: the server's own pace), at $3.5 an hour "
        "(the scenario's cost.usd_per_hour):"
    ) in lines
    assert f"# {headline}\n" in best


def test_one_run_quotes_its_capacity_brackets_cost_and_says_it_is_that_alone():
    from objectives.serving_cost import CostInterval

    assert (
        fmt_usd(CostInterval(3.39, 2.6, 3.39, 1)) == "$3.39 [2.60, 3.39] (1 run: its capacity search's bracket alone)"
    )
    assert (
        fmt_cost_ratio(CostInterval(0.27, 0.2, 0.31, 1))
        == "0.27x [0.20, 0.31] (1 run: its capacity search's bracket alone)"
    )
    assert fmt_usd(CostInterval(3.39, 3.39, 3.39, 1)) == "$3.39 (1 run)"  # a bracket that is a point
    assert fmt_usd(CostInterval(3.39, 2.6, 4.1, 3)) == "$3.39 [2.60, 4.10]"
