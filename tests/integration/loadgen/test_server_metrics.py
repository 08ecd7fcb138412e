"""The gauge sampler scrapes the stub server's /metrics periodically over HTTP."""

from __future__ import annotations

import asyncio
import itertools

from loadgen.server_metrics import GaugeSample, GaugeSampler
from tests.support.stub_server import StubConfig, StubServer


def test_sampler_reads_gauges_periodically():
    async def run(url: str) -> list[GaugeSample]:
        import aiohttp

        async with aiohttp.ClientSession() as session:
            sampler = GaugeSampler(session, url, period_s=0.05)
            sampler.start()
            await asyncio.sleep(0.5)
            return await sampler.stop()

    with StubServer(StubConfig()) as s:
        samples = asyncio.run(run(s.base_url))
    assert len(samples) >= 5
    assert all(x.running == 0 and x.kv_usage == 0 for x in samples)
    assert all(b.t > a.t for a, b in itertools.pairwise(samples))
