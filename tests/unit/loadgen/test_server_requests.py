"""What the load generator makes of the answers to its requests around the load, now asked through
`vllm_http`: the served model and the errors a run stops on, the server's chat token count, the
client's pre-connect, the liveness check's /health and the drain between stages. On a scripted
session: no socket."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from loadgen import LoadRunError, ProgressWatch, ServerTokenCounter, wait_idle
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


def gauges(running: int, waiting: int = 0) -> Answer:
    return Answer(200, f"vllm:num_requests_running {running}\nvllm:num_requests_waiting {waiting}\n")


def draining(monkeypatch, *metrics) -> list[FakeSession]:
    """The sessions `wait_idle` opens, each answering `metrics` in turn, a model and its token."""
    opened = []

    def open_session(trace_configs):
        script = {"GET /metrics": list(metrics), "GET /v1/models": [Answer.json(MODELS)]}
        opened.append(FakeSession(URL, {**script, "POST /v1/completions": [Answer(200)]}))
        return opened[-1]

    monkeypatch.setattr(aiohttp, "ClientSession", open_session)
    monkeypatch.setattr("loadgen.liveness.IDLE_POLL_S", 0.0)
    return opened


def test_the_drain_waits_until_nothing_runs_or_waits(monkeypatch):
    opened = draining(monkeypatch, gauges(2), gauges(0, 1), gauges(0))
    _, note = run(wait_idle(URL, 10))
    assert note is None and opened[0].paths() == ["GET /metrics"] * 3
    assert {s.kwargs["timeout"].total for s in opened[0].sent} == {5.0}


@pytest.mark.parametrize(
    ("metrics", "note"),
    [
        (Answer(404), "no /metrics: did not wait for the server to drain"),
        (Answer(200, "# nothing\n"), "no request gauges in /metrics: did not wait to drain"),
    ],
)
def test_a_server_without_gauges_is_not_waited_for(monkeypatch, metrics, note):
    draining(monkeypatch, metrics)
    assert run(wait_idle(URL, 10))[1] == note


def test_a_drain_that_runs_out_of_time_says_what_was_left(monkeypatch):
    draining(monkeypatch, gauges(1, 4))
    _, note = run(wait_idle(URL, 0.0))
    assert note is not None and "1 running, 4 waiting" in note


def test_a_drain_owed_an_answer_credits_idle_gauges_once_the_engine_answers(monkeypatch):
    opened = draining(monkeypatch, gauges(0))
    watch = ProgressWatch(5.0)
    watch.ask("GET /metrics", time.perf_counter())  # sent, never answered: owed
    progress: list[float] = []
    monkeypatch.setattr(watch, "progress", progress.append)
    run(wait_idle(URL, 10, watch))
    assert opened[0].paths() == ["GET /metrics", "GET /v1/models", "POST /v1/completions"]
    assert len(progress) == 1  # the one-token answer: idle gauges are the engine's present
