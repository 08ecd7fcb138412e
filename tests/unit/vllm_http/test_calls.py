"""Each of `vllm_http`'s requests, on a scripted session: what counts as an answer, what each
failure raises, which timeout each sends. The prefix-cache reset against the stub server is in
tests/integration/vllm_http/."""

from __future__ import annotations

import asyncio
import http.client

import aiohttp
import pytest

import vllm_http
from tests.support.fake_http import Answer, FakeSession
from vllm_http import BadStatus, TimedOut, Unanswered, calls

URL = "http://server:8000"


def run(coro):
    return asyncio.run(coro)


# -- /health -------------------------------------------------------------------------------------


def test_any_health_status_is_an_answer_with_the_timeout_given():
    s = FakeSession(URL, {"GET /health": [Answer(503)]})
    assert run(vllm_http.get_health(s, URL, 3.0)) == 503
    assert s.sent[0].url == URL + "/health" and s.sent[0].kwargs["timeout"].total == 3.0


@pytest.mark.parametrize(
    ("error", "timed_out"),
    [
        (TimeoutError(), True),
        (aiohttp.ServerTimeoutError("read"), True),  # a ClientError too: silence all the same
        (aiohttp.ClientConnectionError("refused"), False),
        (ConnectionRefusedError(), False),
    ],
)
def test_health_silence_is_timed_out_and_a_refused_connection_only_unanswered(error, timed_out):
    s = FakeSession(URL, {"GET /health": [error]})
    with pytest.raises(Unanswered) as raised:
        run(vllm_http.get_health(s, URL, 3.0))
    assert isinstance(raised.value, TimedOut) is timed_out


def test_healthy_is_a_200_and_no_answer_is_not(monkeypatch):
    answers = {"up": (200, b""), "starting": (503, b"")}
    asked = []

    class Connection:
        def __init__(self, host, port, timeout):
            self.host, self.timeout = host, timeout

        def request(self, method, path, **kw):
            asked.append((self.host, method, path, self.timeout))
            if self.host == "down":
                raise ConnectionRefusedError("refused")

        def getresponse(self):
            status, body = answers[self.host]
            return type("Response", (), {"status": status, "read": lambda self: body})()

        def close(self):
            pass

    monkeypatch.setattr(calls.http.client, "HTTPConnection", Connection)
    assert vllm_http.healthy("up", 1) is True
    assert vllm_http.healthy("starting", 1) is False
    assert vllm_http.healthy("down", 1, timeout_s=0.5) is False
    assert asked == [
        ("up", "GET", "/health", 2.0),
        ("starting", "GET", "/health", 2.0),
        ("down", "GET", "/health", 0.5),
    ]
    with pytest.raises(Unanswered, match="refused"):
        vllm_http.exchange("down", 1, "POST", "/autotune/reconfigure", json_body={}, timeout_s=1)


def test_exchange_turns_a_broken_answer_into_unanswered(monkeypatch):
    class Connection:
        def __init__(self, *a, **kw):
            pass

        def request(self, *a, **kw):
            pass

        def getresponse(self):
            raise http.client.RemoteDisconnected("closed")

        def close(self):
            pass

    monkeypatch.setattr(calls.http.client, "HTTPConnection", Connection)
    with pytest.raises(Unanswered, match="closed"):
        vllm_http.exchange("h", 1, "GET", "/x", timeout_s=1)


# -- /v1/models ----------------------------------------------------------------------------------


def test_served_models_is_the_data_list_on_the_sessions_timeout_unless_given():
    data = [{"id": "m", "root": "/models/m"}]
    s = FakeSession(URL, {"GET /v1/models": [Answer.json({"data": data})]})
    assert run(vllm_http.served_models(s, URL)) == data
    assert "timeout" not in s.sent[0].kwargs
    assert run(vllm_http.served_models(s, URL, 2.0)) == data
    assert s.sent[1].kwargs["timeout"].total == 2.0


def test_served_models_says_the_status_or_that_nothing_answered():
    s = FakeSession(URL, {"GET /v1/models": [Answer(404, "not found")]})
    with pytest.raises(BadStatus) as bad:
        run(vllm_http.served_models(s, URL))
    assert str(bad.value) == f"GET {URL}/v1/models -> HTTP 404" and bad.value.status == 404
    s = FakeSession(URL, {"GET /v1/models": [aiohttp.ClientConnectionError("refused")]})
    with pytest.raises(Unanswered, match=r"^GET /v1/models failed \(refused\)$"):
        run(vllm_http.served_models(s, URL))


# -- /metrics ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "text"),
    [(Answer(200, "vllm:x 1\n"), "vllm:x 1\n"), (Answer(404), None), (TimeoutError(), None), (OSError(), None)],
)
def test_metrics_text_is_the_body_of_a_200_and_none_otherwise(answer, text):
    s = FakeSession(URL, {"GET /metrics": [answer]})
    assert run(vllm_http.fetch_metrics_text(s, URL, timeout_s=5)) == text
    assert s.sent[0].kwargs["timeout"].total == 5


# -- /tokenize -----------------------------------------------------------------------------------


def test_count_chat_tokens_posts_the_messages_and_reads_the_count():
    s = FakeSession(URL, {"POST /tokenize": [Answer.json({"count": 17})]})
    messages = [{"role": "user", "content": "hi"}]
    assert run(vllm_http.count_chat_tokens(s, URL, "m", messages)) == 17
    assert s.sent[0].kwargs["json"] == {"model": "m", "messages": messages}


def test_count_chat_tokens_says_a_refusal_with_the_start_of_its_body():
    s = FakeSession(URL, {"POST /tokenize": [Answer(400, "x" * 400)]})
    with pytest.raises(BadStatus) as bad:
        run(vllm_http.count_chat_tokens(s, URL, "m", []))
    assert str(bad.value) == "POST /tokenize -> HTTP 400: " + "x" * 300 and bad.value.status == 400


# -- /reset_prefix_cache -------------------------------------------------------------------------


class Watch:
    def trace_configs(self) -> list:
        return ["traced"]


def resetting(monkeypatch, *answers) -> list[FakeSession]:
    """Sessions `reset_prefix_cache` opens, each answering `answers`."""
    opened = []

    def open_session(trace_configs):
        s = FakeSession(URL, {"POST /reset_prefix_cache": list(answers)})
        s.trace_configs = trace_configs
        opened.append(s)
        return s

    monkeypatch.setattr(aiohttp, "ClientSession", open_session)
    monkeypatch.setattr(calls, "RESET_RETRY_S", 0.0)
    return opened


@pytest.mark.parametrize(
    ("answers", "result", "posts"),
    [
        ([Answer.json({"success": True})], True, 1),
        ([Answer(200, "")], True, 1),  # older vLLM: 200 with no body
        ([Answer(409), Answer(409), Answer.json({"success": True})], True, 3),  # blocks held, then reset
        ([Answer(409)], False, calls.RESET_ATTEMPTS),
        ([Answer.json({"success": False})], False, calls.RESET_ATTEMPTS),
        ([Answer(404)], None, 1),  # not a dev-mode server
        ([aiohttp.ClientConnectionError("refused")], None, 1),
        ([Answer(200, "not json")], None, 1),
    ],
)
def test_reset_prefix_cache(monkeypatch, answers, result, posts):
    opened = resetting(monkeypatch, *answers)
    assert run(vllm_http.reset_prefix_cache(URL)) is result
    assert len(opened[0].sent) == posts and opened[0].sent[0].kwargs["timeout"].total == 10


def test_the_watch_given_sees_the_resets_requests(monkeypatch):
    opened = resetting(monkeypatch, Answer.json({"success": True}))
    run(vllm_http.reset_prefix_cache(URL, Watch()))
    run(vllm_http.reset_prefix_cache(URL))
    assert [s.trace_configs for s in opened] == [["traced"], []]
