"""The open-loop schedule equals the installed `vllm bench serve`'s get_request (vLLM imported,
no server started).
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from loadgen.arrivals import ArrivalSpec, open_loop_offsets


@pytest.mark.vllm
def test_schedule_equals_vllm_get_request(monkeypatch):
    """Drive the installed `vllm bench serve` get_request on a fake clock; same seed, same times."""
    from vllm.benchmarks import serve

    clock = [1000.0]

    async def fake_sleep(s):
        clock[0] += s

    monkeypatch.setattr(serve.time, "time", lambda: clock[0])
    monkeypatch.setattr(serve.asyncio, "sleep", fake_sleep)

    async def times(n, rate, burstiness, seed):
        np.random.seed(seed)  # as vllm bench serve's main does
        out = []
        async for _ in serve.get_request(list(range(n)), rate, burstiness):
            out.append(clock[0] - 1000.0)
        return np.array(out)

    theirs = asyncio.run(times(200, 5.0, 0.5, 123))
    ours = open_loop_offsets(ArrivalSpec(mode="gamma", rate=5.0, burstiness=0.5), 200, None, 123)
    assert np.allclose(ours, theirs, atol=1e-9)
