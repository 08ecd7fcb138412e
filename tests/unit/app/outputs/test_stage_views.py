"""The views of load stages and capacity, on a study the real loop ran on a scripted executor.

tests/fixtures/scenarios/loop_capacity.yaml: TTFT at the target load against capacity under the
SLO; `staged` scripts each trial's target stage and capacity search (some stages abort early).
Trial 0 is the vllm_defaults baseline (met, met, aborted, aborted, violated: capacity 2.27 req/s),
trial 1 the starved baseline (its target stage aborted: capacity 0).
"""

import io
import json

import pytest
from rich.console import Console
from sqlalchemy.orm import Session

from app.outputs import DashboardPublisher, StudyProgress, dashboard, export, load_study, summary_table, write_report
from app.outputs.read_model import trial_views
from storage import database, queries
from tests.support.paths import FIXTURES
from tests.support.scripted_executor import ScriptedExecutor, staged
from tests.support.study_loop import runner

SCENARIO = FIXTURES / "scenarios" / "loop_capacity.yaml"


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """(storage URL, run dir, what the progress display printed)."""
    tmp = tmp_path_factory.mktemp("staged")
    executor = ScriptedExecutor()
    executor.script = staged(executor)
    out = io.StringIO()
    progress = StudyProgress(Console(file=out, width=400, force_terminal=False))
    r = runner(tmp, executor, scenario=SCENARIO, trials=5, observers=[progress, DashboardPublisher()])
    r.run()
    return r.prep.storage_url, tmp, out.getvalue()


@pytest.fixture(scope="module")
def loaded(study):
    url = study[0]
    with Session(database.open_db(url), expire_on_commit=False) as session:
        ls = load_study(session, url, "loop")
        yield ls, trial_views(ls)


def _plot(page: str, div_id: str) -> tuple[list[dict], dict]:
    """(traces, layout) of the plotly figure drawn in div `div_id`: Plotly.newPlot("id", data, layout, ...)."""
    decoder = json.JSONDecoder()
    rest = page[page.index(f'"{div_id}",') + len(div_id) + 3 :].lstrip()
    data, end = decoder.raw_decode(rest)
    layout, _ = decoder.raw_decode(rest[end:].lstrip(", \n"))
    return data, layout


def test_report_draws_latency_against_rate_with_the_slo_bounds_and_each_capacity(study, loaded, tmp_path):
    _ls, views = loaded
    page = write_report(study[0], "loop", tmp_path / "report.html").read_text()
    traces, layout = _plot(page, "fig-latency-vs-rate")
    # One row per latency SLO, each bound a dashed line at its (resolved) value; error_rate has none.
    assert sorted(s["y0"] for s in layout["shapes"]) == [100, 2000]
    assert {"SLO ttft_p95_ms <= 2,000", "SLO tpot_p95_ms <= 100"} <= {a["text"] for a in layout["annotations"]}
    base = views[0]
    cap = base.capacity
    [points] = [
        t
        for t in traces
        if t["yaxis"] == "y"  # the first row: ttft_p95_ms
        and t.get("name", "").startswith("trial 0 (vllm_defaults): capacity 2.27 req/s")
    ]
    assert points["y"] == [s.metrics["ttft_p95_ms"] for s in sorted(base.stages, key=lambda s: s.rate)]
    assert sorted(points["x"]) == sorted(s.rate for s in base.stages)
    aborted = [s for s in sorted(base.stages, key=lambda s: s.rate) if s.aborted]
    assert len(aborted) == 2 and points["marker"]["symbol"].count("circle-open") == 2
    assert sum("aborted: ttft_p95_ms<=2000 is certain" in text for text in points["text"]) == 2  # hover: why
    # The capacity: a vertical line at it, over its bracket (met at low, violated at high).
    assert [cap.rps, cap.rps] in [t["x"] for t in traces]
    assert any(min(t["x"]) == cap.low and max(t["x"]) == cap.high for t in traces if t.get("fill"))
    # A menu shows one trial at a time.
    assert [b["label"] for b in layout["updatemenus"][0]["buttons"]][:3] == [
        "all trials",
        views[0].label,
        views[1].label,
    ]
    # The Pareto front's axes say which way is better, capacity included.
    _, pareto = _plot(page, "fig-pareto-0-1")
    assert pareto["yaxis"]["title"]["text"] == "slo_capacity_rps (higher is better)"


def test_a_loaded_study_carries_its_trial_views_past_its_session(study, loaded):
    """The read model is read once: after its session closed, each trial's view, load stages
    included, is there for the terminal summary as for the report and the dashboard."""
    with Session(database.open_db(study[0]), expire_on_commit=False) as session:
        ls = load_study(session, study[0], "loop")
    assert [v.number for v in ls.views] == sorted(ls.trials)
    assert ls.views == loaded[1]  # what `trial_views` builds inside the session
    assert [len(v.stages) for v in ls.views[:2]] == [5, 1] and ls.views[0].stages[0].kind == "target"
    assert summary_table(ls).row_count == len(ls.trials)


def test_report_trials_table_folds_each_trials_stage_table(study, tmp_path):
    page = write_report(study[0], "loop", tmp_path / "report.html").read_text()
    row0 = page.split('<tr data-trial="0"', 1)[1].split('<tr data-trial="1"', 1)[0]
    assert "5 load stages: 2 met, 1 violated, 2 aborted (saved 3.02 s)" in row0
    assert "capacity 2.27 req/s (met at 2, violated at 2.38)" in row0
    assert "<td>3</td><td>capacity</td><td>4</td><td></td><td>aborted: " in row0
    assert "<th>load stages</th>" in page


def test_dashboard_note_tables_the_stages_and_states_the_capacity(study, loaded):
    import optuna
    from optuna_dashboard import get_note

    ls, views = loaded
    st = optuna.load_study(study_name="loop", storage=study[0])
    note = get_note(optuna.trial.Trial(st, st.trials[0]._trial_id))  # written live, by the publisher
    assert note == dashboard.trial_note(views[0], ls.scenario)  # the same as `autotune dashboard` writes
    assert "**Capacity under the SLO**: 2.27 req/s (met at 2, violated at 2.38)" in note
    assert "### Load stages (5 load stages: 2 met, 1 violated, 2 aborted (saved 3.02 s))" in note
    assert (
        "| stage | kind | rate (req/s) | requests (by class) | outcome | elapsed (s) | saved (s) | idle wait (s) |"
        in note
    )
    assert "| 1 | target | 1 |  | met every SLO | 10 |  |  |" in note  # scripted: no requests stored
    assert (
        "| 3 | capacity | 4 |  | aborted: ttft_p95_ms<=2000 is certain to be violated (scripted) | 1.25 | 1.25 | 0.5 |"
        in note
    )
    starved = dashboard.trial_note(views[1], ls.scenario)
    assert "**Capacity under the SLO**: misses the SLO even at 1 req/s" in starved


def test_dashboard_figures_include_latency_against_rate(study, loaded):
    ls, views = loaded
    with Session(database.open_db(study[0])) as session:
        figs = dashboard.build_figures(ls, views, queries.front_history(session, ls.record))
    assert "latency-vs-rate" in figs
    assert {s.y0 for s in figs["latency-vs-rate"].layout.shapes} == {100, 2000}


def test_best_yaml_quotes_the_chosen_capacity_beside_each_baselines(study, loaded):
    _ls, views = loaded
    chosen = next(v for v in views if v.chosen)
    with Session(database.open_db(study[0])) as session:
        best = export.export(session, study[0], "loop", study[1] / "export").best.path.read_text()
    new, old = chosen.capacity.rps, views[0].capacity.rps
    gain = f"{(new - old) / old * 100:+.0f}%"
    line = next(x for x in best.splitlines() if x.startswith("# capacity under the SLO: "))
    assert line.startswith(f"# capacity under the SLO: {chosen.capacity.summary}; baselines: ")
    assert f"vllm_defaults 2.27 req/s ({gain})" in line
    assert line.endswith(", starved 0 req/s")  # no gain over nothing


def test_progress_summary_adds_the_capacity_and_what_early_aborts_saved(study):
    printed = study[2]
    assert (
        "trial 0 (baseline vllm_defaults): ttft_p95_ms 637, slo_capacity_rps 2.271; feasible; "
        "capacity 2.27 req/s (met at 2, violated at 2.38); early aborts saved 3 s"
    ) in printed
    assert (
        "trial 1 (baseline starved): ttft_p95_ms 8512, slo_capacity_rps 0; violates SLOs; capacity "
        "misses the SLO even at 1 req/s, the lowest rate tried; early aborts saved 5 s"
    ) in printed


def test_a_stage_row_shows_its_requests_by_class_and_why_it_was_not_steady():
    from app.outputs.trial_views import stage_rows, stage_view
    from objectives.stages import CAPACITY, ClassMix, StageResult, SteadyState

    stage = StageResult(
        1,
        CAPACITY,
        4.0,
        35.0,
        36.0,
        0.2,
        {},
        {},
        {},
        stage_requests=140,
        capped="capped: ...",
        mix=ClassMix({"short": 84, "long": 36}, {"short": 84, "long": 36}, 1.0, True),
        steady=SteadyState(False, (5.0, 30.0), None, None, "over-saturated: still growing at its end (...)"),
    )
    [row] = stage_rows([stage_view(stage)])
    assert row[3] == "120 of 140 (short 84, long 36, capped)"
    assert row[4] == "violated: over-saturated: still growing at its end (...)"


def test_the_summary_says_what_the_stages_sent_by_class_against_the_weights():
    from app.outputs.summary import stages_line
    from app.outputs.trial_views import StageView

    def view(short: int, long: int, **kw) -> StageView:
        return StageView(
            0, "target", 1.0, 10.0, 0.0, 0.0, True, None, {}, {}, {"short": short, "long": long}, 140, **kw
        )

    line = stages_line(
        [view(98, 42), view(99, 41, over_saturated="over-saturated: ..."), view(70, 30, capped=True)],
        {"short": 0.7, "long": 0.3},
    )
    assert line == (
        "the search's 3 load stages sent 380 requests (short 267, long 113); each stage's classes within 1.00 of a "
        "request of the scenario's weights; 1 over-saturated at their end, 1 cut by their time cap"
    )
    assert stages_line([view(0, 0)], {"short": 0.7, "long": 0.3}) is None
    # turn ranges follow the sessions a stage holds: no deviation from a quota order is claimed
    sessions = stages_line([view(20, 100)], {"short": 0.18, "long": 0.82}, sessions=True)
    assert "turn ranges as the stages' sessions made them" in sessions and "within" not in sessions
