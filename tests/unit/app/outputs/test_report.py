"""Report and dashboard publishing on a study of recorded real runs (no server), built by the
study loop itself (scoring, constraints told to Optuna, storage, snapshots) on a scripted executor.

Three trials, one per category: feasible (the unstarved client run), infeasible (the queue-bound
run, which breaks the TTFT SLO) and failed (a real kv_insufficient startup log).
"""

import json
import re

import optuna
import pytest
import yaml
from sqlalchemy.orm import Session

from app.outputs import dashboard, export
from app.outputs.report import write_report
from loadgen import CLIENT_BEHIND
from loadgen.metrics import lag_limit_ms
from search.executor import TrialOutcome
from search.prepare import StudyOptions, prepare
from search.scenario import Scenario
from search.study import StudyRunner
from search.study.attributes import diagnosis_attrs
from search.trial_results import diagnosis_of
from serving import Failure
from serving.failures import classify
from storage import database, queries
from storage.tables import TrialStatus
from tests.support.fakes import ctx as fake_ctx
from tests.support.paths import FIXTURES
from tests.support.scripted_executor import ScriptedExecutor

RUNS = FIXTURES / "runs"
LOGS = FIXTURES / "logs"

SCENARIO = {
    "name": "recorded",
    "title": "recorded runs",
    "workload": {
        "endpoint": "completions",
        "duration_s": 20,
        "arrival": {"mode": "poisson", "rate": 6.0},
        "prompt_tokens": {"dist": "uniform", "low": 100, "high": 160},
        "output_tokens": {"dist": "uniform", "low": 48, "high": 80},
    },
    "objectives": [
        {"metric": "request_throughput", "direction": "maximize"},
        {"metric": "ttft_p95_ms", "direction": "minimize"},
    ],
    "slos": [{"metric": "ttft_p95_ms", "max": 1000}],
    "selection": {"rule": "best_of", "metric": "request_throughput", "tolerance": 0.1, "then": "ttft_p95_ms"},
    "search_space": {"max_num_seqs": {"low": 2, "high": 64, "log": True}},
    "server": {"fixed": {"max_model_len": 1024, "memory_utilization": 0.25}},
    "baselines": {"vllm_defaults": {}},
}


def _record(name):
    return json.loads((RUNS / f"{name}.json").read_text())


def replay(plan) -> TrialOutcome:
    """The recorded run of the plan's max_num_seqs (the baseline: the client_control run), or the recorded startup
    failure (8). `client_behind` as today's lag limit judges the recorded lag."""
    mns = plan.config.get("max_num_seqs")
    if mns == 8:
        cls, line = classify((LOGS / "kv_insufficient.log").read_text(), returncode=1)
        return TrialOutcome(
            status=TrialStatus.FAILED, failure=Failure(cls, line, phase="startup"), command="vllm serve ..."
        )
    run = _record("queue_bound" if mns == 2 else "client_control")
    metrics = {
        **run["metrics"],
        CLIENT_BEHIND: float(run["metrics"]["schedule_lag_p99_ms"] > lag_limit_ms(run["target_rate"])),
    }
    return TrialOutcome(
        status=TrialStatus.OK, metrics=metrics, server_diagnostics=run["server_diagnostics"], command="vllm serve ..."
    )


@pytest.fixture
def study(tmp_path):
    """Built as a study is: the study loop (scoring, constraints told to Optuna, storage,
    snapshots) on a scripted executor replaying the recorded runs."""
    scenario = tmp_path / "recorded.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO, sort_keys=False))
    url = f"sqlite:///{tmp_path / 'r.db'}"

    def run(trials, enqueue=()):
        opts = StudyOptions(
            scenario=str(scenario), trials=trials, storage=url, study_name="recorded", runs_dir=tmp_path, confirm_runs=0
        )
        r = StudyRunner(prepare(opts, ctx=fake_ctx()), opts, executor=ScriptedExecutor(script=replay).factory)
        for params in enqueue:
            r.study.enqueue_trial(params)
        r.run()

    run(1)  # trial 0: the vllm_defaults baseline
    run(3, [{"max_num_seqs": 2}, {"max_num_seqs": 8}])  # trials 1 (queue-bound) and 2 (fails to start)
    return url


def _figure_traces(page: str, div_id: str) -> list[dict]:
    m = re.search(r'Plotly\.newPlot\(\s*"' + re.escape(div_id) + r'",\s*(\[.*?\]),\s*\{', page, re.S)
    assert m, f"no figure {div_id}"
    return json.loads(m.group(1))


def test_report_tells_the_three_categories_apart(study, tmp_path):
    out = write_report(study, "recorded", tmp_path / "report.html")
    page = out.read_text()
    assert "<script src=" not in page and "<link " not in page  # self-contained: nothing fetched
    names = [t.get("name", "") for t in _figure_traces(page, "fig-pareto-0-1")]
    assert "feasible (meets every SLO): 1" in names
    assert "infeasible (violates an SLO): 1" in names
    assert "failed (never served; drawn at the worst edge): 1" in names
    assert "baselines" in names and "chosen" in names
    assert re.search(r'data-trial="1" data-category="infeasible"', page)
    assert re.search(r'data-trial="2" data-category="failed"', page)
    # The verdict in plain words: trial 0 is the only feasible one, and it is the baseline.
    assert "Recommended: trial 0 (vllm_defaults)" in page
    assert "is the vllm_defaults baseline itself" in page
    # Diagnoses stored with the trials show up.
    assert "queueing" in page and "startup_failure" in page and "kv_insufficient" in page
    # No load stages in this study: no latency-against-rate figure, no stage column.
    assert "fig-latency-vs-rate" not in page and "<th>load stages</th>" not in page


def test_publish_writes_figures_and_notes_the_dashboard_reads(study):
    from optuna_dashboard import get_note
    from optuna_dashboard._custom_plot_data import get_plotly_graph_objects

    done = dashboard.publish(study, "recorded")
    assert done.trial_notes == 3
    st = optuna.load_study(study_name="recorded", storage=study)
    graphs = get_plotly_graph_objects(st._storage.get_study_system_attrs(st._study_id))
    assert {
        "feasible-pareto-front",
        "optuna-pareto-front-constraints",
        "hypervolume-history",
        "bottlenecks",
        "all-trials",
    } <= set(graphs)
    # Optuna's own plot sees the constraints the study loop told it: the queue-bound run is its infeasible one.
    optuna_plot = json.loads(graphs["optuna-pareto-front-constraints"])
    [infeasible] = [t for t in optuna_plot["data"] if "Infeasible Trial" in t.get("hovertemplate", "")]
    assert infeasible["x"] == [pytest.approx(3.007, rel=1e-3)]
    pareto = json.loads(graphs["feasible-pareto-front"])
    assert any(t.get("name", "").startswith("infeasible (violates an SLO): 1") for t in pareto["data"])
    assert "trial 0 (vllm_defaults)" in get_note(st).split("Feasible Pareto front")[1]
    notes = [get_note(optuna.trial.Trial(st, t._trial_id)) for t in st.trials]
    assert "FEASIBLE" in notes[0] and "INFEASIBLE" in notes[1] and "FAILED (never served)" in notes[2]
    assert "Bottleneck: queueing" in notes[1] and "Bottleneck: startup failure" in notes[2]
    assert "server_queue_time_mean_ms" in notes[1]  # every measured metric
    assert dashboard.publish(study, "recorded").trial_notes == 0  # unchanged: not rewritten


def test_publish_trial_notes_one_trial_as_the_study_tells_it(study):
    from optuna_dashboard import get_note

    st = optuna.load_study(study_name="recorded", storage=study)
    with Session(database.open_db(study)) as s:
        rec = queries.require_study(s, "recorded")
        row = queries.trial_records(s, rec)[1]
        scenario = Scenario.model_validate(SCENARIO)
        dashboard.publish_trial(optuna.trial.Trial(st, st.trials[1]._trial_id), row, scenario)
    note = get_note(optuna.trial.Trial(st, st.trials[1]._trial_id))
    assert note.startswith("## trial 1: INFEASIBLE") and "Bottleneck: queueing" in note
    assert diagnosis_attrs(diagnosis_of(row))["bottleneck"] == "queueing"


def test_best_yaml_and_report_state_the_selection_rule_in_the_same_words(study, tmp_path):
    rule = "the best ttft_p95_ms among the configurations within 10% of the best request_throughput"
    with Session(database.open_db(study)) as s:
        assert export.load_study(s, study, "recorded").scenario.selection.describe() == rule
        best_yaml = export.export(s, study, "recorded", tmp_path).best.path
    assert f", trial 0, picked by: {rule}\n" in best_yaml.read_text()
    page = write_report(study, "recorded", tmp_path / "report.html").read_text()
    assert f"on the feasible Pareto front as {rule}. It measured" in page
