"""The drain between load stages (`loadgen.wait_idle`, from /metrics' request gauges) against the
stub server.

Timing asserts leave generous margins: the stub runs on a thread of this process and the machine
may be busy.
"""

from __future__ import annotations

import asyncio

from loadgen import wait_idle
from tests.support.stub_server import StubConfig, StubServer


def stub(tok_dir, tok, **kw) -> StubServer:
    return StubServer(StubConfig(root=str(tok_dir), **kw), tokenizer=tok)


def test_wait_idle_waits_for_running_and_waiting_to_reach_zero(tok_dir, tok):
    with stub(tok_dir, tok) as s:
        waited, note = asyncio.run(wait_idle(s.base_url, timeout_s=10))
        assert note is None and waited < 0.5  # idle already
        s.stub.pin_gauges(running=2, waiting=0, for_s=0.8)
        waited, note = asyncio.run(wait_idle(s.base_url, timeout_s=10))
        assert note is None and 0.7 <= waited < 5
        s.stub.pin_gauges(running=0, waiting=3, for_s=0.8)  # queued only: still busy
        waited, note = asyncio.run(wait_idle(s.base_url, timeout_s=10))
        assert note is None and 0.7 <= waited < 5


def test_wait_idle_gives_up_after_its_timeout_with_a_note(tok_dir, tok):
    with stub(tok_dir, tok) as s:
        s.stub.pin_gauges(running=1, waiting=4, for_s=60)
        waited, note = asyncio.run(wait_idle(s.base_url, timeout_s=0.6))
    assert 0.6 <= waited < 5
    assert note is not None and "still busy" in note and "1 running, 4 waiting" in note


def test_wait_idle_without_metrics_does_not_wait(tok_dir, tok):
    with stub(tok_dir, tok, metrics_enabled=False) as s:
        waited, note = asyncio.run(wait_idle(s.base_url, timeout_s=10))
    assert waited < 2 and note is not None and "no /metrics" in note
