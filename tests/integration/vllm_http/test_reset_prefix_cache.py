"""The prefix-cache reset between load stages (`vllm_http.reset_prefix_cache`) against the stub
server: once when it succeeds, retried while blocks are held, none where the endpoint is absent.
"""

from __future__ import annotations

import asyncio

from tests.support.stub_server import StubConfig, StubServer
from vllm_http import reset_prefix_cache
from vllm_http.calls import RESET_ATTEMPTS


def stub(tok_dir, tok, **kw) -> StubServer:
    return StubServer(StubConfig(root=str(tok_dir), **kw), tokenizer=tok)


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
