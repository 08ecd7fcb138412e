"""Multi-turn sessions: each turn resends the conversation with the server's own answers, waits for
the answer before it and the think time, and is measured by its turn index."""

from __future__ import annotations

import asyncio
import math
import time

import pytest
from pydantic import ValidationError

from loadgen import SessionSpec, WorkloadSpec, cached_prefix_share, turn_messages, turn_stats
from loadgen.client import _delta_text
from loadgen.request_record import HTTP_ERROR, RequestRecord
from loadgen.session_dispatch import SessionRunner, SessionStart
from loadgen.sessions import ScriptBook, SessionScript, Turn

SESSIONS = {"turns": 3, "user_tokens": 12, "output_tokens": 5, "system_prompt_tokens": 20}


def session_workload(**sessions) -> WorkloadSpec:
    return WorkloadSpec.model_validate(
        {
            "endpoint": "chat",
            "arrival": {"mode": "poisson", "rate": 6.0},
            "num_requests": 30,
            "sessions": {**SESSIONS, **sessions},
        }
    )


SCRIPT = SessionScript(
    7,
    "be brief",
    (Turn("hello there", 4, 0.05), Turn("and then?", 4, 0.05), Turn("thanks", 4, 0.0)),
)


def test_a_turn_prompt_holds_the_previous_turns_and_answers_exactly():
    assert turn_messages(SCRIPT, ["A1", "A2"], 2) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello there"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "and then?"},
        {"role": "assistant", "content": "A2"},
        {"role": "user", "content": "thanks"},
    ]
    assert turn_messages(SCRIPT, [], 0) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello there"},
    ]
    with pytest.raises(ValueError, match="needs the answers"):
        turn_messages(SCRIPT, ["A1"], 2)


class FakeClient:
    """Answers each turn after `latency_s` with text naming the turn; fails the turns listed."""

    def __init__(self, latency_s: float = 0.02, fail_turns: tuple[int, ...] = ()):
        self.latency_s, self.fail_turns = latency_s, fail_turns
        self.seen: list[tuple[RequestRecord, list[dict]]] = []

    def prepare(self, request, model, temperature):
        return request

    async def send(self, request, rec: RequestRecord) -> None:
        rec.send_time = time.perf_counter()
        self.seen.append((rec, [dict(m) for m in request.messages]))
        await asyncio.sleep(self.latency_s)
        if rec.turn in self.fail_turns:
            rec.fail(HTTP_ERROR, "HTTP 500", time.perf_counter())
            return
        now = time.perf_counter()
        rec.chunk_times = [now - 0.001, now]
        rec.first_token_time = rec.chunk_times[0]
        rec.end_time = now
        rec.answer.extend([f"answer {rec.session}.", f"{rec.turn}"])


def _runner(client, spec=None) -> SessionRunner:
    spec = spec or SessionSpec.model_validate(SESSIONS)
    return SessionRunner(spec, None, client, "m", 0.0)  # type: ignore[arg-type]


def test_each_turn_resends_the_answers_it_got_and_waits_for_them_and_the_think_time():
    client = FakeClient()
    runner = _runner(client)
    asyncio.run(runner.run_session(SCRIPT, SessionStart(time.perf_counter())))
    (r1, _), (r2, m2), (r3, m3) = client.seen
    assert [r.turn for r in (r1, r2, r3)] == [1, 2, 3] and {r.session for r in (r1, r2, r3)} == {7}
    assert m2[2] == {"role": "assistant", "content": "answer 7.1"}
    assert m3 == [*m2, {"role": "assistant", "content": "answer 7.2"}, {"role": "user", "content": "thanks"}]
    # sent only after the previous answer ended and the user's 50 ms of thought
    assert r2.send_time >= r1.end_time + 0.05 and r3.send_time >= r2.end_time + 0.05
    assert [r.class_name for r in runner.records] == ["first", "later", "later"]
    assert runner.answers[7] == ["answer 7.1", "answer 7.2", "answer 7.3"]


def test_a_failed_turn_ends_its_session():
    client = FakeClient(fail_turns=(2,))
    runner = _runner(client)
    asyncio.run(runner.run_session(SCRIPT, SessionStart()))
    assert [r.turn for r in runner.records] == [1, 2]  # turn 3 has no answer to resend
    assert runner.records[1].failed


def test_per_turn_metrics_count_each_turn_index_on_its_own():
    def rec(turn: int, ttft: float, ok: bool = True) -> RequestRecord:
        r = RequestRecord(0, "x", 0.0, 0, 3, session=1, turn=turn)
        r.send_time = 10.0
        if ok:
            r.chunk_times = [10.0 + ttft, 10.0 + ttft + 0.02, 10.0 + ttft + 0.04]
            r.end_time = r.chunk_times[-1]
            r.prompt_tokens = 100 * turn
        else:
            r.fail(HTTP_ERROR, "HTTP 500", 10.5)
        return r

    stats = turn_stats([rec(1, 0.1), rec(1, 0.3), rec(2, 0.05), rec(2, 0.0, ok=False), rec(3, 0.2)])
    assert [(s.turn, s.sent, s.failed) for s in stats] == [(1, 2, 0), (2, 2, 1), (3, 1, 0)]
    assert stats[0].ttft_p50_ms == pytest.approx(200) and stats[1].ttft_p50_ms == pytest.approx(50)
    assert stats[0].tpot_p50_ms == pytest.approx(20) and stats[2].prompt_tokens_mean == 300


def test_the_reuse_share_counts_leading_blocks_an_earlier_prompt_left_as_vllm_does():
    first = list(range(8))
    second = [*first, 90, 91, 92, 93]  # two blocks of 4 shared, then a new one
    assert cached_prefix_share([first, second], 4) == pytest.approx(8 / 20)
    # a prompt met in full still computes its last token: its last block is not a hit
    assert cached_prefix_share([first, first], 4) == pytest.approx(4 / 16)
    # a later block that matches after a miss is not a prefix: no hit
    assert cached_prefix_share([first, [50, 51, 52, 53, *first[4:]]], 4) == 0
    # a warm-up fills the cache but is not counted
    assert cached_prefix_share([first, second], 4, counted_from=1) == pytest.approx(8 / 12)


def test_turn_classes_name_turn_ranges_and_weigh_by_their_share_of_turns():
    spec = SessionSpec.model_validate({**SESSIONS, "turns": 4, "turn_classes": {"opening": 1, "middle": 2, "late": 4}})
    assert [spec.class_of_turn(t) for t in (1, 2, 3, 4, 9)] == ["opening", "middle", "middle", "late", "late"]
    assert spec.class_weights() == pytest.approx({"opening": 0.25, "middle": 0.5, "late": 0.25})
    wl = session_workload(turns=4)
    assert wl.class_names == ["first", "later"]
    assert [c.weight for c in wl.classes] == pytest.approx([0.25, 0.75])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"endpoint": "completions"}, "set endpoint: chat"),
        ({"prompt_tokens": 10, "output_tokens": 4}, "remove prompt_tokens, output_tokens"),
        ({"sessions": {**SESSIONS, "turn_classes": {"later": 2}}}, "start at turn 1"),
        ({"sessions": {**SESSIONS, "turn_classes": {"a": 1, "b": 3, "c": 2}}}, "increasing turns"),
        ({"sessions": {**SESSIONS, "turns": {"dist": "uniform", "low": 0, "high": 3}}}, r"sessions.turns.low"),
    ],
)
def test_a_session_workload_that_cannot_run_is_refused_naming_the_field(change, message):
    data = {"endpoint": "chat", "arrival": {"mode": "poisson", "rate": 1.0}, "num_requests": 5, "sessions": SESSIONS}
    with pytest.raises(ValidationError, match=message):
        WorkloadSpec.model_validate({**data, **change})


def test_a_session_workload_is_counted_in_turns_and_sessions_arrive_at_the_rate_over_the_mean_turns():
    wl = session_workload(turns={"dist": "uniform", "low": 2, "high": 4})  # 3 turns on average
    assert wl.sessions.mean_turns() == pytest.approx(3, rel=0.01)
    assert wl.session_arrival().rate == pytest.approx(2.0, rel=0.01)
    assert wl.sessions_for(30) == 10 and len(wl.schedule()) == 10
    assert wl.longest_request_tokens() >= 20 + 4 * (12 + 5)


def test_session_scripts_depend_on_seed_and_index_alone_and_span_the_turn_counts(tok):
    spec = SessionSpec.model_validate({**SESSIONS, "turns": {"dist": "uniform", "low": 1, "high": 6}})
    book = ScriptBook(spec, 3, 0, tok)
    again = ScriptBook(spec, 3, 0, tok)
    assert book.script(5) == again.script(5) and book.script(5) != book.script(6)
    assert book.script(0).system == book.script(9).system  # one system prompt for every session
    counts = [len(book.script(i).turns) for i in range(12)]
    assert set(counts) == {1, 2, 3, 4, 5, 6}  # a dozen sessions span the distribution
    assert all(math.isclose(s.think_s, 0.0) for s in book.script(2).turns)  # the default: no pause


def test_the_client_keeps_a_session_turns_answer_text():
    chunk = b'{"id":"x","choices":[{"index":0,"delta":{"content":" hi"},"finish_reason":null}]}'
    assert _delta_text(chunk, chat=True) == " hi"
    assert _delta_text(b'{"choices":[{"index":0,"text":"yo"}]}', chat=False) == "yo"


def test_an_open_loop_holds_a_record_for_every_planned_turn_before_the_first_is_sent():
    # What reads the records while a run goes on (an early-abort check counts against each
    # class's planned requests) must see the whole plan, not the few turns sent so far.
    at_first_send: list[tuple[int, int]] = []

    class Watching(FakeClient):
        async def send(self, request, rec):
            if not at_first_send:
                sent = sum(r.send_time == r.send_time for r in runner.records)
                at_first_send.append((len(runner.records), sent))
            await super().send(request, rec)

    spec = SessionSpec.model_validate({**SESSIONS, "turns": {"dist": "uniform", "low": 1, "high": 4}})
    runner = SessionRunner(spec, _Book(spec), Watching(latency_s=0.001), "m", 0.0)
    asyncio.run(runner.open_loop([0.0, 0.01, 0.02, 0.03]))
    planned = sum(len(runner.scripts[i].turns) for i in runner.scripts)
    assert at_first_send == [(planned, 0)]
    assert all(r.send_time == r.send_time for r in runner.records)  # every planned turn went out
    assert [r.turn for r in runner.records if r.session == 0] == list(range(1, len(runner.scripts[0].turns) + 1))
    report_sessions = {r.session for r in runner.records}
    assert report_sessions == {0, 1, 2, 3}


class _Book:
    """Scripts without a tokenizer: 1 to 4 turns by index, fixed texts."""

    def __init__(self, spec: SessionSpec):
        self.spec = spec

    def script(self, index: int) -> SessionScript:
        n = 1 + index % 4
        return SessionScript(index, None, tuple(Turn(f"q{index}.{t}", 3, 0.0) for t in range(n)))
