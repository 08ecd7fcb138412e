"""The tuner's HTTP to a running server against the stub server: the drain (`wait_idle`, from
/metrics' request gauges) and the prefix-cache reset (`reset_prefix_cache`) between load stages
(serving.http_control).

Timing asserts leave generous margins: the stub runs on a thread of this process and the machine
may be busy.
"""

from __future__ import annotations

import asyncio

from serving import reset_prefix_cache, wait_idle
from serving.http_control import RESET_ATTEMPTS
from tests.support.stub_server import StubConfig, StubServer


def stub(tok_dir, tok, **kw) -> StubServer:
    return StubServer(StubConfig(root=str(tok_dir), **kw), tokenizer=tok)


# -- wait_idle ----------------------------------------------------------------------------------


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


# -- reset_prefix_cache -------------------------------------------------------------------------


def test_reset_prefix_cache_posts_once_when_it_succeeds(tok_dir, tok):
    with stub(tok_dir, tok) as s:
        assert asyncio.run(reset_prefix_cache(s.base_url)) is True
        assert (s.stats.resets, s.stats.reset_successes) == (1, 1)


def test_reset_prefix_cache_absent_is_none(tok_dir, tok):
    with stub(tok_dir, tok, reset_prefix_cache="absent") as s:
        assert asyncio.run(reset_prefix_cache(s.base_url)) is None
        assert s.stats.resets == 0


def test_reset_prefix_cache_retries_while_blocks_are_held(tok_dir, tok):
    with stub(tok_dir, tok, reset_prefix_cache="busy:2") as s:
        assert asyncio.run(reset_prefix_cache(s.base_url)) is True
        assert (s.stats.resets, s.stats.reset_successes) == (3, 1)
    with stub(tok_dir, tok, reset_prefix_cache="busy:100") as s:
        assert asyncio.run(reset_prefix_cache(s.base_url)) is False
        assert s.stats.resets == RESET_ATTEMPTS and s.stats.reset_successes == 0


def test_reset_prefix_cache_empty_200_is_a_reset(tok_dir, tok):
    with stub(tok_dir, tok, reset_prefix_cache="empty") as s:
        result = asyncio.run(reset_prefix_cache(s.base_url))
        assert s.stats.resets == 1
    assert result is True
