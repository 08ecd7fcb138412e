"""Every output quotes the confirmation phase's numbers: best.yaml, the terminal summary, the
report, the dashboard's study note and the live progress, on studies the real loop ran on a
scripted executor (no vLLM).

The world (tests/fixtures/scenarios/loop_confirm.yaml, made calibrated here): max_num_seqs 16, 8
and 4, then the vllm_defaults baseline (trial 3); TTFT decides. The search measures a lucky 400 ms
for 16; the confirmation runs measure each configuration's true TTFT times each round's drift
(-2%, 0, +2%). Calibration: three rounds, capacity 3.56, 3.70 and 3.98 req/s.
"""

import io
import json
import re

import pytest
import yaml
from rich.console import Console
from sqlalchemy.orm import Session

from app.outputs import StudyProgress, dashboard, export, load_study, write_report
from app.outputs.confirmation_rows import confirmation_rows
from app.outputs.read_model import trial_views
from app.outputs.summary import confirmation_table, summary_table, verdict_lines
from search.calibration import CalibrationResult
from storage import database, queries
from tests.support.confirmation_world import LUCKY_16, TRUTH, enqueued
from tests.support.confirmation_world import world as _world
from tests.support.paths import FIXTURES
from tests.support.scripted_executor import ScriptedExecutor
from tests.support.study_loop import runner

BASELINE = 3
LUCKY, BETTER = 0, 1  # max_num_seqs 16 (lucky in the search) and 8 (truly better); 4 is trial 2


def calibrated_scenario(tmp_path):
    """loop_confirm with its load at half the calibrated capacity and its TTFT bound 8x the
    unloaded median (250 ms: 2,000 ms, as the fixture's)."""
    doc = yaml.safe_load((FIXTURES / "scenarios" / "loop_confirm.yaml").read_text())
    doc["workload"]["arrival"] = {"mode": "poisson", "capacity_fraction": 0.5}
    doc["slos"] = [{"metric": "ttft_p95_ms", "max": {"x_unloaded": 8}}]
    path = tmp_path / "loop_confirm.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def three_rounds(scenario, ctx, baseline, run_dir, on_phase) -> CalibrationResult:
    rounds = [
        {"capacity_rps": c, "unloaded": {"ttft_median_ms": t, "tpot_median_ms": 20.0}}
        for c, t in ((3.56, 245.0), (3.98, 255.0), (3.70, 250.0))
    ]
    return CalibrationResult.from_rounds(rounds, [{"request_throughput": r["capacity_rps"]} for r in rounds], 1.0)


def world(true_ttft: dict, fail=None):
    """The search measures 400 ms for max_num_seqs 16, the truth for the others."""
    return _world(true_ttft, LUCKY_16, fail)


LEVEL = {None: 1000.0, 4: 1000.0, 8: 1000.0, 16: 1000.0}  # nothing beats the defaults
SLOW = {None: 2500.0, 4: 2600.0, 8: 2200.0, 16: 2400.0}  # nothing meets the 2,000 ms bound


def run_study(tmp_path, script, *, confirm_runs=None, before=None):
    """(storage URL, what the live progress printed)."""
    out = io.StringIO()
    progress = StudyProgress(Console(file=out, width=400, force_terminal=False))
    r = runner(
        tmp_path,
        ScriptedExecutor(script=script, before=before),
        scenario=calibrated_scenario(tmp_path),
        confirm_runs=confirm_runs,
        observers=[progress],
        calibrate=three_rounds,
    )
    enqueued(r).run()
    return r.prep.storage_url, out.getvalue()


@pytest.fixture(scope="module")
def recommended(tmp_path_factory):
    return run_study(tmp_path_factory.mktemp("recommend"), world(TRUTH))


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    return run_study(tmp_path_factory.mktemp("keep"), world(LEVEL))


@pytest.fixture(scope="module")
def none_feasible(tmp_path_factory):
    return run_study(tmp_path_factory.mktemp("none"), world(SLOW, fail=(None, 1)))


def loaded(url):
    with Session(database.open_db(url), expire_on_commit=False) as session:
        return load_study(session, url, "loop")


def exported(url, out_dir):
    with Session(database.open_db(url)) as session:
        return export.export(session, url, "loop", out_dir)


def header_and_body(path) -> tuple[list[str], dict]:
    text = path.read_text()
    return [x[2:] for x in text.splitlines() if x.startswith("# ")], yaml.safe_load(text)


def flags_of(url, trial_number) -> dict:
    ls = loaded(url)
    return {"model": ls.record.model_path, **ls.trials[trial_number].flags}


# --- best.yaml ------------------------------------------------------------------------------


def test_best_yaml_deploys_the_confirmed_winner_and_quotes_its_confirmed_numbers(recommended, tmp_path):
    url = recommended[0]
    done = exported(url, tmp_path)
    assert done.deployment.trial_number == BETTER and done.deployment.confirmed
    header, body = header_and_body(done.best.path)
    assert body == flags_of(url, BETTER)  # not the search's lucky pick (trial 0)
    assert (
        "verdict: deploy trial 1: wins on ttft_p95_ms beyond the noise against vllm_defaults "
        "(output_throughput equal within 5%)" in header
    )
    assert (
        "  ttft_p95_ms 600 ms [588, 612] vs vllm_defaults 1,000 ms [980, 1,020]: -40% [-42, -38], 3+3 runs; "
        "better beyond the noise" in header
    )
    assert "SLOs on its confirmed medians: met (closest: ttft_p95_ms<=2000, 70% headroom)" in header
    assert "run-to-run noise (CV over 3 runs each): ttft_p95_ms 2.0%, output_throughput 2.0%" in header
    assert (
        "calibration: capacity 3.70 req/s [3.56, 3.98] over 3 rounds (CV 5.7%; the reference could move "
        "-3.8% to +7.6%); the target load (50% of it) moves with it"
    ) in header
    assert any(
        x.startswith("calibration: unloaded ttft_median_ms 250 ms [245, 255] over 3 rounds")
        and x.endswith("the bound ttft_p95_ms <= 8x moves with it")
        for x in header
    )
    # What was there before stays: the study, vLLM and hardware, the command.
    assert any(x.startswith("study 'loop' in sqlite:///") and ", trial 1, confirmed over 3 runs" in x for x in header)
    assert any(x.startswith("vLLM: ") and "; hardware: " in x for x in header)
    assert any(x.startswith("command: scripted ") for x in header)


def test_best_yaml_keeps_the_baseline_when_nothing_beats_it_and_says_why(kept, tmp_path):
    url = kept[0]
    done = exported(url, tmp_path)
    header, body = header_and_body(done.best.path)
    assert done.deployment.trial_number == BASELINE and body == flags_of(url, BASELINE)
    assert (
        "verdict: keep vllm_defaults (trial 3): nothing beats it beyond the noise "
        "(trial 0 ttft_p95_ms equal within 5%, output_throughput equal within 5%)"
    ) in header
    # The ties: the front's second and the baseline are within the noise of the rule's first.
    assert (
        "trial 2 and vllm_defaults (trial 3) are within the noise of trial 0 on every objective; trial 0 "
        "picked by the tie-break: the best ttft_p95_ms, ties broken by the best output_throughput, on the "
        "confirmed medians, but it does not beat vllm_defaults (trial 3) beyond the noise"
    ) in header
    assert (
        "  ttft_p95_ms 1,000 ms [980, 1,020] vs vllm_defaults 1,000 ms [980, 1,020]: +0.0% [-3.9, +4.1], "
        "3+3 runs; equal within 5%" in header
    )


def test_no_best_yaml_when_none_met_the_slos_on_confirmed_medians_and_the_closest_is_named(none_feasible, tmp_path):
    url = none_feasible[0]
    (tmp_path / "best.yaml").write_text("model: stale\n")  # an earlier export's
    done = exported(url, tmp_path)
    assert not (tmp_path / "best.yaml").exists()
    assert done.best == export.NoBestYaml(
        "no configuration is recommended: none met the SLOs on its confirmed medians; "
        "closest: trial 0, ttft_p95_ms<=2000 missed by 20%",
        removed_stale=True,
    )
    assert done.pareto.exists()


def test_without_confirmation_the_rules_pick_is_deployed_and_the_header_says_it_is_unconfirmed(tmp_path):
    url, _ = run_study(tmp_path, world(TRUTH), confirm_runs=0)
    done = exported(url, tmp_path / "out")
    header, body = header_and_body(done.best.path)
    assert done.deployment.trial_number == LUCKY and not done.deployment.confirmed
    assert body == flags_of(url, LUCKY)
    assert any(x.startswith("single, unconfirmed measurements: no confirmation phase ran") for x in header)
    assert "measured (this trial, once):" in header and "  ttft_p95_ms: 400" in header


def test_an_interrupted_confirmation_says_how_to_finish_and_deploys_nothing_it_has_not_confirmed(tmp_path):
    calls = []

    def stop_at_the_fifth_run(plan):
        if plan.run_name:
            calls.append(plan.number)
            if len(calls) == 5:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_study(tmp_path, world(TRUTH), before=stop_at_the_fifth_run)
    url = f"sqlite:///{tmp_path / 'loop.db'}"
    done = exported(url, tmp_path / "out")
    header, _ = header_and_body(done.best.path)
    assert not done.deployment.confirmed
    assert "confirmation incomplete: 4 of 9 runs; run `autotune confirm loop_confirm --study loop` to finish" in header
    assert "until then, the numbers are single, unconfirmed measurements" in header


# --- the terminal: summary at the end, progress while it runs --------------------------------------


def rendered(*renderables) -> str:
    out = io.StringIO()
    console = Console(file=out, width=300, force_terminal=False)
    for r in renderables:
        console.print(r)
    return out.getvalue()


def test_summary_tables_the_confirmed_medians_and_marks_search_differences_within_the_noise(recommended):
    ls = loaded(recommended[0])
    table = rendered(confirmation_table(ls))
    row = next(x for x in table.splitlines() if "trial 1 *" in x)
    assert "3/3" in row and "600 ms [588, 612]" in row and "100 tok/s [98, 102]" in row
    assert "met (closest: ttft_p95_ms<=2000, 70% headroom)" in row
    assert "ttft_p95_ms win, output_throughput equal" in row
    # The search's single values: throughput 100-102 vs the defaults' 99 is within a 2% noise; TTFT is not.
    search = rendered(summary_table(ls))
    trial0 = next(x for x in search.splitlines() if x.lstrip("│ ").startswith("0 p"))
    assert "100 ~" in trial0 and "400 ~" not in trial0
    assert "~ within the run-to-run noise of a" in search
    lines = verdict_lines(ls)
    assert lines[0].startswith("deploy trial 1: ")
    assert "run-to-run noise (CV over 3 runs each): ttft_p95_ms 2.0%, output_throughput 2.0%" in lines
    assert any(
        x.startswith("warning: ttft_p95_ms over ~8 requests per run is decided by the single slowest") for x in lines
    )
    assert any(x.startswith("calibration: capacity 3.70 req/s [3.56, 3.98]") for x in lines)


def test_summary_lists_infeasible_candidates_with_their_worst_margin_and_failures(none_feasible):
    lines = verdict_lines(loaded(none_feasible[0]))
    assert "trial 0: misses ttft_p95_ms<=2000 by 20% on its confirmed medians" in lines
    assert "vllm_defaults (trial 3): 1 of 3 runs failed (round 2: oom: scripted: killed by the OOM killer)" in lines


def test_the_cli_finish_prints_the_verdict_and_why_no_best_yaml_was_written(none_feasible, tmp_path):
    from app.cli.terminal import finish_outputs

    out = io.StringIO()
    finish_outputs(Console(file=out, width=300, force_terminal=False), none_feasible[0], "loop", tmp_path)
    printed = out.getvalue()
    assert "no configuration is recommended: none met the SLOs on its confirmed medians" in printed
    assert "no best.yaml written: no configuration is recommended" in printed
    assert not (tmp_path / "best.yaml").exists() and (tmp_path / "report.html").exists()


def test_progress_prints_each_confirmation_run_and_the_verdict(recommended, none_feasible):
    printed = recommended[1]
    assert (
        "confirmation: 9 runs to go (3 candidates x 3 runs on fresh servers, interleaved): "
        "trial 0, trial 1, vllm_defaults (trial 3)"
    ) in printed
    assert "  confirm 2/9 (round 1): trial 1: ttft_p95_ms 588, output_throughput 98; feasible" in printed
    assert (
        "  confirm 9/9 (round 3): vllm_defaults (trial 3): ttft_p95_ms 1020, output_throughput 102; feasible" in printed
    )
    assert (
        "  [" in printed and "] confirm 4/9 (round 2): trial 0: starting" in printed
    )  # the run is the current "trial"
    assert (
        "verdict: deploy trial 1: wins on ttft_p95_ms beyond the noise against vllm_defaults "
        "(output_throughput equal within 5%)"
    ) in printed
    failed = none_feasible[1]
    assert "  confirm 4/6 (round 2): vllm_defaults (trial 3): failed: oom: scripted: killed by the OOM killer" in failed
    assert (
        "  confirm 2/6 (round 1): vllm_defaults (trial 3): ttft_p95_ms 2450, output_throughput 98; "
        "violates ttft_p95_ms<=2000" in failed
    )


# --- the report and the dashboard --------------------------------------------------------------


def _plot(page: str, div_id: str) -> list[dict]:
    rest = page[page.index(f'"{div_id}",') + len(div_id) + 3 :].lstrip()
    data, _ = json.JSONDecoder().raw_decode(rest)
    return data


def test_report_has_a_confirmation_section_with_the_verdict_runs_noise_and_calibration(recommended, tmp_path):
    page = write_report(recommended[0], "loop", tmp_path / "report.html").read_text()
    top = page.split('id="verdict">', 1)[1].split("</div>", 1)[0]
    assert top.startswith("<p>deploy trial 1: wins on ttft_p95_ms beyond the noise against vllm_defaults")
    section = page.split('<h2 id="confirmation">Confirmation</h2>', 1)[1].split('<h2 id="bottlenecks">', 1)[0]
    assert (
        "<li>ttft_p95_ms 700 ms [686, 714] vs vllm_defaults 1,000 ms [980, 1,020]: -30% [-33, -27], 3+3 runs; "
        "better beyond the noise</li>" in section
    )  # every candidate against every baseline
    row = re.search(r'<tr data-trial="1" class=chosen>(.*?)</tr>', section).group(1)
    assert "trial 1 (deployed)" in row and "600 ms [588, 612]" in row and "ttft_p95_ms win" in row
    assert '<tr><td>ttft_p95_ms</td><td>objective</td><td class="num">2.0%</td></tr>' in section
    assert "Calibration reference (how far it could move)" in section
    assert "the reference could move -3.8% to +7.6%" in section
    traces = _plot(page, "fig-confirmation")
    rounds = [t for t in traces if t["name"] == "round 2" and t["xaxis"] == "x"]
    assert rounds[0]["x"] == ["trial 0", "trial 1 *", "vllm_defaults (trial 3)"] and rounds[0]["y"] == [700, 600, 1000]
    median = next(t for t in traces if t["name"] == "median [95% interval]" and t["xaxis"] == "x")
    assert median["y"] == [700, 600, 1000] and median["error_y"]["array"] == pytest.approx([14, 12, 20])
    assert json.loads(page.split('id="report-summary">', 1)[1].split("</script>", 1)[0])["verdict"] == "recommend"


def test_the_confirmation_table_is_built_once_and_drawn_alike_by_the_terminal_and_the_report(recommended, tmp_path):
    ls = loaded(recommended[0])
    t = confirmation_rows(ls)
    assert (t.runs, t.runs_done, t.runs_planned, t.baselines, t.deployed) == (3, 9, 9, ["vllm_defaults"], BETTER)
    assert [(r.label, r.deployed, r.runs_ok, r.feasible, r.baseline) for r in t.rows] == [
        ("trial 0", False, "3/3", True, False),
        ("trial 1", True, "3/3", True, False),
        ("vllm_defaults (trial 3)", False, "3/3", True, True),
    ]
    deployed = t.rows[1]
    assert dict(zip(t.objectives, deployed.medians)) == {
        "ttft_p95_ms": ("600 ms [588, 612]", 600.0),
        "output_throughput": ("100 tok/s [98, 102]", 100.0),
    }
    assert deployed.calls == [{"ttft_p95_ms": "win", "output_throughput": "equal"}] and t.rows[2].calls == [None]
    terminal = rendered(confirmation_table(ls))
    page = write_report(recommended[0], "loop", tmp_path / "report.html").read_text()
    html = page.split('id="confirmation-table">', 1)[1].split("</table>", 1)[0]
    for row in t.rows:
        line = next(x for x in terminal.splitlines() if row.label in x)
        cells = re.search(rf'<tr data-trial="{row.trial_number}"[^>]*>(.*?)</tr>', html).group(1)
        for text, median in row.medians:
            assert text in line and f'data-v="{median!r}">{text}</td>' in cells
        assert row.runs_ok in line and f'<td class="num">{row.runs_ok}</td>' in cells


def test_report_of_an_unconfirmed_study_says_its_numbers_are_single_measurements(tmp_path):
    url, _ = run_study(tmp_path, world(TRUTH), confirm_runs=0)
    page = write_report(url, "loop", tmp_path / "report.html").read_text()
    section = page.split('<h2 id="confirmation">Confirmation</h2>', 1)[1]
    assert section.startswith('<p class="note">single, unconfirmed measurements: no confirmation phase ran')
    assert "fig-confirmation" not in page


def test_dashboard_study_note_quotes_the_verdict_and_the_noise_and_draws_the_runs(recommended):
    url = recommended[0]
    with Session(database.open_db(url), expire_on_commit=False) as session:
        ls = load_study(session, url, "loop")
        views = trial_views(ls)
        note = dashboard.study_note(ls, views, None)
        figs = dashboard.build_figures(ls, views, queries.front_history(session, ls.record))
    assert {t.name for t in figs["confirmation-runs"].data} == {
        "round 1",
        "round 2",
        "round 3",
        "median [95% interval]",
    }
    assert note.splitlines()[2] == (
        "- deploy trial 1: wins on ttft_p95_ms beyond the noise against vllm_defaults (output_throughput equal within 5%)"
    )
    assert "## Confirmation (re-measured on fresh servers)" in note
    assert (
        "  - ttft_p95_ms 600 ms [588, 612] vs vllm_defaults 1,000 ms [980, 1,020]: -40% [-42, -38], 3+3 runs; "
        "better beyond the noise"
    ) in note
    assert "- run-to-run noise (CV over 3 runs each): ttft_p95_ms 2.0%, output_throughput 2.0%" in note
    assert "- calibration: capacity 3.70 req/s [3.56, 3.98] over 3 rounds" in note


def test_the_verdict_shows_the_screening_against_the_confirmation(recommended):
    """Per confirmed candidate the search's screening call beside the confirmation's, and the
    share that agree: the search read 16 seqs lucky but it met the SLOs there and in confirmation."""
    ls = loaded(recommended[0])
    lines = ls.verdict_text().agreement
    assert lines[0] == "screening against confirmation, per confirmed candidate:"
    assert any(line.startswith("trial 0: screened feasible") and "confirmed feasible" in line for line in lines)
    assert any(line.startswith("feasibility at the target: screening agrees") for line in lines)
    assert "screening against confirmation, per confirmed candidate:" in ls.verdict_text().lines()


def test_one_run_a_candidate_calls_no_difference_and_says_why_not_within_the_noise(tmp_path):
    # Trial 1 (max_num_seqs 8) meets the 2,000 ms bound, vLLM's defaults miss it by 25%: one
    # confirmation run each measures no run-to-run noise, so the verdict calls no difference and
    # says so, rather than reading the defaults as within the noise of the pick.
    url, _ = run_study(tmp_path, world({None: 2500.0, 4: 2600.0, 8: 1000.0, 16: 2400.0}), confirm_runs=1)
    lines = verdict_lines(loaded(url))
    assert (
        "deploy trial 1: one run each against vllm_defaults: no difference called beyond the noise "
        "(vllm_defaults misses the SLOs)"
    ) in lines
    assert not any("within the noise" in x for x in lines)
    assert (
        "  ttft_p95_ms 980 ms (1 run) vs vllm_defaults 2,450 ms (1 run): -60%, 1+1 runs; not called (one run a side)"
        in lines
    )


def test_one_run_a_candidate_keeps_the_baseline_and_names_the_command_that_can_decide(tmp_path):
    # Every configuration meets the 2,000 ms bound; trial 1 (max_num_seqs 8) measures 1,000 ms
    # against the defaults' 1,500. One run each calls nothing, so the baseline is kept, and the
    # verdict names the command whose further rounds can call the difference.
    url, _ = run_study(tmp_path, world({None: 1500.0, 4: 1800.0, 8: 1000.0, 16: 1600.0}), confirm_runs=1)
    lines = verdict_lines(loaded(url))
    assert (
        "keep vllm_defaults (trial 3): with one run each no difference is called beyond the noise; "
        "`autotune confirm loop_confirm --study loop --confirm-runs 3` adds the runs that can "
        "(trial 1 not called on ttft_p95_ms, output_throughput)"
    ) in lines
    # What the command does: the same study confirmed again with 3 runs a candidate keeps its
    # stored round and adds two, which call the difference.
    url, _ = run_study(tmp_path, world({None: 1500.0, 4: 1800.0, 8: 1000.0, 16: 1600.0}), confirm_runs=3)
    done = loaded(url)
    assert sorted((r.trial_number, r.round) for r in done.confirmation_runs) == [
        (t, r) for t in (0, 1, 3) for r in range(3)
    ]
    assert (
        "deploy trial 1: wins on ttft_p95_ms beyond the noise against vllm_defaults (output_throughput equal within 5%)"
    ) in verdict_lines(done)


def test_a_goodput_scenario_reads_each_confirmed_capacity_from_its_runs(tmp_path):
    """`api_service` maximizes the goodput at the capacity, so no objective holds
    `slo_capacity_rps`: the screening's agreement reads each confirmed capacity from the runs, as
    the cost lines do. The real study of docs/results.md ("An API service against vLLM's
    throughput preset"), 2 runs a candidate."""
    import gzip

    from tests.support.paths import REPO

    db = tmp_path / "api_service.db"
    with gzip.open(REPO / "benchmarks" / "data" / "study-api_service-xfast-cpu.db.gz") as src:
        db.write_bytes(src.read())
    url = f"sqlite:///{db}"
    with Session(database.open_db(url), expire_on_commit=False) as session:
        lines = load_study(session, url, "api-2").verdict_text().agreement
    assert "trial 5: screened feasible, 5.98 req/s [5.14, 6.71]; confirmed feasible, 5.98 req/s [5.81, 6.33]" in lines
    assert not any("no capacity" in line for line in lines), lines
    assert any(line.startswith("capacity: ") and "screening / confirmation median" in line for line in lines), lines
