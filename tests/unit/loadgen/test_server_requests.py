"""What the load generator makes of the answers to its requests around the load, now asked through
`vllm_http`: the served model and the errors a run stops on, the server's chat token count, the
client's pre-connect, the liveness check's /health and its one-token request. On a scripted
session: no socket."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from loadgen import LoadRunError, ServerTokenCounter
from loadgen.client import AiohttpClient
from loadgen.liveness import _health_answered, engine_answers
from loadgen.preparation import discover_model
from tests.support.fake_http import Answer, FakeSession

URL = "http://server:8000"
MODELS = {"data": [{"id": "first", "root": "/models/first"}, {"id": "second"}]}


def run(coro):
    return asyncio.run(coro)


def test_the_served_model_is_the_first_or_the_one_named():
    s = FakeSession(URL, {"GET /v1/models": [Answer.json(MODELS)]})
    assert run(discover_model(s, URL)) == ("first", "/models/first")
    assert run(discover_model(s, URL, "second")) == ("second", None)
    assert run(discover_model(s, URL, "absent")) == ("absent", None)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (Answer(404), f"GET {URL}/v1/models -> HTTP 404"),
        (aiohttp.ClientConnectionError("refused"), f"cannot reach {URL}: GET /v1/models failed (refused)"),
        (TimeoutError("late"), f"cannot reach {URL}: GET /v1/models failed (late)"),
        (Answer.json({"data": []}), f"{URL} serves no model"),
    ],
)
def test_a_server_that_serves_no_model_stops_the_run_in_one_line(answer, message):
    s = FakeSession(URL, {"GET /v1/models": [answer]})
    with pytest.raises(LoadRunError) as raised:
        run(discover_model(s, URL))
    assert str(raised.value) == message


def test_the_servers_chat_count_or_a_run_error_with_its_answer():
    s = FakeSession(URL, {"POST /tokenize": [Answer.json({"count": 9}), Answer(400, "no template")]})
    counter = ServerTokenCounter(s, URL, "m")
    assert run(counter([{"role": "user", "content": "hi"}])) == 9
    with pytest.raises(LoadRunError, match=r"^POST /tokenize -> HTTP 400: no template$"):
        run(counter([]))


def test_preconnect_counts_the_connections_an_answer_came_on():
    client = AiohttpClient(URL, "completions", 60.0)
    answers = [Answer(200), Answer(503), TimeoutError(), aiohttp.ClientConnectionError("refused"), Answer(200)]
    client.session = FakeSession(URL, {"GET /health": answers})  # type: ignore[assignment]
    client._url = object()  # type: ignore[assignment]
    assert run(client.preconnect(5)) == 3
    assert client.session.paths() == ["GET /health"] * 5
    assert {s.kwargs["timeout"].total for s in client.session.sent} == {10.0}


@pytest.mark.parametrize(
    ("answer", "answered"),
    [(Answer(503), True), (aiohttp.ClientConnectionError("refused"), True), (TimeoutError(), False)],
)
def test_only_silence_on_health_is_evidence_of_a_hang(answer, answered):
    s = FakeSession(URL, {"GET /health": [answer]})
    assert run(_health_answered(s, URL, 3.0)) is answered


@pytest.mark.parametrize(
    ("models", "completion", "answers"),
    [
        (Answer.json(MODELS), Answer(200), True),
        (Answer.json(MODELS), Answer(500), False),
        (Answer(404), Answer(200), False),
        (Answer.json({"data": []}), Answer(200), False),
        (TimeoutError(), Answer(200), False),
        (Answer.json(MODELS), TimeoutError(), False),
    ],
)
def test_the_engine_answers_a_one_token_request_of_the_first_model(models, completion, answers):
    s = FakeSession(URL, {"GET /v1/models": [models], "POST /v1/completions": [completion]})
    assert run(engine_answers(s, URL, 2.0)) is answers
    if answers:
        assert s.sent[1].kwargs["json"]["model"] == "first"
        assert [x.kwargs["timeout"].total for x in s.sent] == [2.0, 2.0]
