"""Every started trial stores the memory arithmetic's KV cache tokens beside vLLM's own, read from
its server log, with its server diagnostics."""

from __future__ import annotations

from dataclasses import replace

import pytest

from loadgen.workload import WorkloadSpec
from search.executor import Measurement, TrialPlan, VllmExecutor
from search.executor import vllm as executor_mod
from serving import Failure, FailureClass, resolve_server_args
from serving.process import ServerFailed, StopReport
from storage.tables import TrialStatus
from tests.support import fakes
from tests.support.paths import FIXTURES

CPU_LOG = (FIXTURES / "logs" / "engine_killed.log").read_text()  # CPU KV cache size: 65,536 tokens


class LoggingServer:
    zygote_failure = None  # as VllmServer: no zygote failed in its start

    def __init__(self, log_path, fails: bool):
        self.log_path, self.fails, self.ready_s = log_path, fails, 1.0

    def start(self):
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_text(CPU_LOG)
        if self.fails:
            raise ServerFailed(Failure(FailureClass.OOM, "oom line", phase="startup"))

    def stop(self, kill: bool = False):
        return StopReport(0.1, False, True, None)


@pytest.fixture
def run(tmp_path, monkeypatch):
    def measure(self, server, outcome, on_phase, *_):
        outcome.server_diagnostics = {"num_preemptions": 0.0}  # the load run's /metrics view

    monkeypatch.setattr(VllmExecutor, "_measure", measure)
    ctx = replace(fakes.ctx(), dtype=None)  # bf16 KV: 4096 bytes per token for the fake model
    workload = WorkloadSpec.model_validate(
        {
            "endpoint": "completions",
            "prompt_tokens": 10,
            "output_tokens": 4,
            "arrival": {"mode": "poisson", "rate": 1.0},
            "num_requests": 4,
        }
    )
    config = {"memory_utilization": 0.25, "max_model_len": 2048}

    def run_trial(fails: bool = False):
        monkeypatch.setattr(executor_mod, "launch", lambda ctx, args, log_path, **_: LoggingServer(log_path, fails))
        plan = TrialPlan(1, None, {}, config, resolve_server_args(config, ctx, where="t"), [])
        return VllmExecutor(ctx, Measurement(workload), tmp_path).run(plan)

    return run_trial


def test_a_started_trial_stores_the_predicted_and_the_logged_kv_cache(run):
    outcome = run()
    assert outcome.status is TrialStatus.OK
    assert outcome.server_diagnostics == {
        "num_preemptions": 0.0,
        "kv_cache_tokens_predicted": 65_536,
        "kv_cache_tokens_vllm": 65_536,
        "kv_cache_tokens_error": 0.0,
    }


def test_a_server_that_never_started_has_no_kv_check(run):
    outcome = run(fails=True)
    assert outcome.failure.cls is FailureClass.OOM and outcome.server_diagnostics == {}
