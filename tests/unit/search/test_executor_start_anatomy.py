"""A trial stores its server's start anatomy in `timings`, the first token of its load included."""

from __future__ import annotations

import time
from datetime import datetime

from loadgen import RequestRecord, WorkloadSpec
from search.executor import Measurement, TrialPlan, VllmExecutor
from search.executor import vllm as executor_mod
from serving import resolve_server_args, start_anatomy
from serving.process import StopReport
from tests.support import fakes


class AnatomyServer:
    zygote_failure = None  # as VllmServer: no zygote failed in its start

    def __init__(self, log_path):
        self.log_path, self.ready_s = log_path, None

    def start(self):
        self.ready_s = 30.0

    def stop(self, kill: bool = False):
        log = "(APIServer pid=1) INFO 11-25 18:00:08 [x.py:1] up\n"
        return StopReport(0.1, False, True, None, start_anatomy(log, datetime(2026, 11, 25, 18, 0, 0), 30.0))


def test_a_trial_stores_its_start_anatomy_with_the_first_token_of_its_load(tmp_path, monkeypatch):
    def measure(self, server, outcome, on_phase, capacity_hint, watch):
        now = time.perf_counter()  # as run_load tracks them: the warm-up's records, then the measured ones
        watch.track([RequestRecord(0, "c", 0.0, 1, 1, warmup=True, first_token_time=now + 0.5)])
        watch.track([RequestRecord(1, "c", 0.0, 1, 1, send_time=now + 3.0)])  # the first measured request
        watch.track([RequestRecord(2, "c", 0.0, 1, 1, send_time=now + 1.0)])  # a later stage's: not the first run's

    monkeypatch.setattr(VllmExecutor, "_measure", measure)
    monkeypatch.setattr(executor_mod, "launch", lambda ctx, args, log_path, **_: AnatomyServer(log_path))
    ctx = fakes.ctx()
    workload = WorkloadSpec.model_validate(
        {
            "endpoint": "completions",
            "prompt_tokens": 10,
            "output_tokens": 4,
            "arrival": {"mode": "poisson", "rate": 1.0},
            "num_requests": 4,
        }
    )
    plan = TrialPlan(1, None, {}, {}, resolve_server_args({}, ctx, where="t"), [])
    outcome = VllmExecutor(ctx, Measurement(workload), tmp_path).run(plan)
    phases = outcome.timings.start_anatomy.phases
    assert phases["import"] == 8.5 and phases["health"] == 21.5
    assert 0.4 < phases["first token"] < 0.6
    assert 2.4 < phases["load warm-up"] < 2.6  # from the first token to the first measured request
