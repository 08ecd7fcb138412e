"""A study whose search space holds GPU knobs, through the real study loop: on the CPU build each
knob is passed, dropped or forced as the registry says, and it is recorded; on GPUs the memory
arithmetic rejects a configuration that cannot fit before any start, at no cost, and every start
stores the arithmetic's KV cache tokens against vLLM's."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import optuna
import pytest
from sqlalchemy.orm import Session

from app.outputs import DashboardPublisher
from app.outputs.report import write_report
from benchmarks.bench_trial_time import trial_time
from loadgen import CLIENT_BEHIND
from search.executor import VllmExecutor
from search.executor import vllm as executor_mod
from serving.process import StopReport
from storage import database, queries
from tests.support.fakes import CPU, ctx
from tests.support.gpu_contexts import GPU_FLAGS, h100s, model_ctx
from tests.support.paths import FIXTURES
from tests.support.scripted_executor import ScriptedExecutor
from tests.support.study_loop import rows, runner

SCENARIO = FIXTURES / "scenarios" / "gpu_knobs.yaml"
TP_NOTE = "tensor_parallel_size: the CPU build runs each server as one rank on its slot's cores"


def test_on_the_cpu_build_each_gpu_knob_is_passed_dropped_or_forced_and_recorded(tmp_path):
    c = ctx(hw=replace(CPU, cpu_flags=frozenset({"avx512f"})), extra=GPU_FLAGS)
    executor = ScriptedExecutor()
    r = runner(
        tmp_path, executor, scenario=SCENARIO, trials=3, launch_ctx=c, observers=[DashboardPublisher()]
    )  # it publishes the study's notes
    assert set(r.prep.dists) == {"max_num_seqs", "kv_cache_dtype", "enforce_eager"}
    [note] = [n for n in r.prep.space_notes if n.startswith("tensor_parallel_size")]
    assert note.startswith(TP_NOTE) and note.endswith("; not searched")
    r.run()
    study = optuna.load_study(study_name=r.prep.study_name, storage=r.prep.storage_url)
    assert note in study.user_attrs["notes"]
    sampled = [row for row in rows(r) if not row.baseline]
    assert len(sampled) == 2
    for row in sampled:
        assert "tensor-parallel-size" not in row.flags and "tensor_parallel_size" not in row.params
        assert row.flags["kv-cache-dtype"] == row.params["kv_cache_dtype"]  # passed
        assert row.flags["enforce-eager"] == row.params["enforce_eager"]
        assert row.flags["async-scheduling"] is False  # server.fixed asked for true
        assert row.adjustments == [
            {
                "param": "async_scheduling",
                "action": "forced",
                "replacement": ["async_scheduling", False],
                "detail": "the CPU build turns async scheduling off itself (vllm/platforms/cpu.py); passed as False",
            }
        ]
    html = write_report(r.prep.storage_url, r.prep.study_name, tmp_path / "report.html").read_text()
    trials = html[html.index('id="trials-table"') :]
    assert (
        trials.count("the CPU build turns async scheduling off itself (vllm/platforms/cpu.py); passed as False") == 2
    )  # in the sampled trials' parameters


class GpuServer:
    """Starts at once and logs the KV cache size a GPU build would."""

    zygote_failure = None  # as VllmServer: no zygote failed in its start

    def __init__(self, log_path):
        self.log_path, self.ready_s = log_path, 30.0

    def start(self):
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_text(
            "(EngineCore_DP0 pid=1) INFO [kv_cache_utils.py:1307] GPU KV cache size: 480,000 tokens\n"
        )

    def stop(self, kill: bool = False):
        return StopReport(2.0, False, True, True)


def test_on_gpus_what_cannot_fit_is_rejected_before_any_start_and_every_start_checks_the_arithmetic(
    tmp_path, monkeypatch
):
    c = model_ctx("llama-3-70b", hw=h100s(4))  # 131 GiB of weights: one GPU cannot hold them
    monkeypatch.setattr(executor_mod, "launch", lambda ctx, args, log_path, **_: GpuServer(log_path))
    metrics = {
        "output_throughput": 160.0,
        "request_throughput": 8.0,
        "ttft_p95_ms": 500.0,
        "ttft_median_ms": 250.0,
        "error_rate": 0.0,
        "completed": 8.0,
        "failed": 0.0,
        CLIENT_BEHIND: 0.0,
    }
    monkeypatch.setattr(VllmExecutor, "_measure", lambda self, server, outcome, *_: outcome.metrics.update(metrics))
    real = SimpleNamespace(factory=lambda kept_ctx, measurement: VllmExecutor(kept_ctx, measurement, tmp_path / "runs"))
    r = runner(tmp_path, real, scenario=SCENARIO, trials=2, launch_ctx=c)
    assert any(
        n.startswith(
            "baseline vllm_defaults cannot run here and will be recorded as failed: memory_utilization "
            "0.92 leaves no memory for the KV cache"
        )
        for n in r.prep.baseline_notes
    )
    for tp in (1, 4):
        r.study.enqueue_trial(
            {"max_num_seqs": 8, "tensor_parallel_size": tp, "kv_cache_dtype": "auto", "enforce_eager": False}
        )
    r.run()
    stored = rows(r)
    rejected = [row for row in stored if row.failure_phase == "precheck"]
    started = [row for row in stored if row.status == "ok"]
    assert stored[0] in rejected and stored[1] in started and len(started) == 2  # the budget counts starts only
    assert stored[0].failure_line.startswith(
        "memory_utilization 0.92 leaves no memory for the KV cache, less than "
        "one 1024-token request needs (0.92 x 79.6 GiB = 73.23 GiB per GPU, "
        "less weights 131.42 GiB"
    )
    assert stored[0].timings == {} and stored[0].server_diagnostics == {}
    for row in started:
        assert row.flags["tensor-parallel-size"] == 4
        kv = row.server_diagnostics
        assert kv["kv_cache_tokens_vllm"] == 480_000
        assert kv["kv_cache_tokens_error"] == pytest.approx(kv["kv_cache_tokens_predicted"] / 480_000 - 1)
    with Session(database.open_db(r.prep.storage_url)) as session:  # make bench-trial-time's view of the study
        shown = [trial_time(row) for row in queries.trial_records(session, queries.require_study(session, "loop"))]
    expected = [
        f"{d['kv_cache_tokens_predicted']:,} predicted, 480,000 by vLLM ({d['kv_cache_tokens_error']:+.1%})"
        for d in (row.server_diagnostics for row in started)
    ]
    assert [t.kv_check for t in shown if t is not None] == expected
