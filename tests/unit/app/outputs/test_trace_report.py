"""The report of a study that replays a trace shows the trace: its rate over time and the lengths sent."""

import yaml

from app.outputs.report import write_report
from benchmarks.trace_synthetic import azure_csv, synthetic_trace
from search.prepare import StudyOptions, prepare
from search.study import StudyRunner
from tests.support.fakes import ctx as fake_ctx
from tests.support.scripted_executor import ScriptedExecutor
from tests.unit.app.outputs.test_report import SCENARIO, _figure_traces, replay


def test_the_report_draws_the_replayed_trace(tmp_path):
    trace = tmp_path / "azure-synthetic.csv"
    trace.write_text(azure_csv(synthetic_trace(600, seed=1)))
    workload = {
        "endpoint": "completions",
        "duration_s": 20,
        "trace": {"file": str(trace), "max_total_tokens": 1024},
        "arrival": {"mode": "trace", "rate": 6.0},
    }
    scenario = tmp_path / "traced.yaml"
    scenario.write_text(yaml.safe_dump({**SCENARIO, "name": "traced", "workload": workload}, sort_keys=False))
    url = f"sqlite:///{tmp_path / 't.db'}"
    opts = StudyOptions(
        scenario=str(scenario), trials=1, storage=url, study_name="traced", runs_dir=tmp_path, confirm_runs=0
    )
    StudyRunner(prepare(opts, ctx=fake_ctx()), opts, executor=ScriptedExecutor(script=replay).factory).run()

    page = write_report(url, "traced", tmp_path / "report.html").read_text()
    assert 'id="trace"' in page
    rate, prompts, outputs = _figure_traces(page, "fig-trace")
    assert rate["type"] == "bar" and len(rate["y"]) > 10
    assert prompts["type"] == outputs["type"] == "histogram"
    assert max(prompts["x"]) <= 1024  # the lengths sent: clipped to the context
