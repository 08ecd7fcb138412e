"""Sends a workload's sessions: each session's turns one after another, each after the previous
answer and the user's think time; the sessions themselves on the workload's schedule (open loop:
a session starts at each arrival) or by users running sessions back to back (closed loop).

A turn's body is built when it is sent, since it holds the answers before it; everything else
(the scripts, the system prompt) is built before. A turn that fails ends its session: the
conversation cannot go on without its answer, and later turns are not sent.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from loadgen.dispatch import Draining, run_closed_loop, run_open_loop
from loadgen.prompts import Request
from loadgen.request_record import RequestRecord
from loadgen.server_metrics import MetricsSnapshot
from loadgen.sessions import Messages, ScriptBook, SessionScript, SessionSpec, turn_messages
from loadgen.tokenizer import PromptTokenizer
from loadgen.turn_metrics import SessionReport, cached_prefix_share, turn_stats

CACHE_CONFIG_INFO = "vllm:cache_config_info"


@dataclass(slots=True)
class SessionStart:
    """When a session was due to start (set by the dispatch loop, as a request record's)."""

    scheduled_time: float = math.nan


class SessionRunner:
    """Runs sessions first .. of one workload through a load client (`client.LoadClient`);
    `records` holds a record for every turn, and `answers` each session's answers so far.

    An open loop's sessions are known before it starts, so `records` holds every turn they plan
    from the start (sent or not, as a request pool's records), session by session: what reads
    the records while the run goes on (an early-abort check counting against the planned
    requests of each class) sees the whole plan, not the few turns sent so far. A closed loop's
    records are made as its turns are sent."""

    def __init__(
        self,
        spec: SessionSpec,
        book: ScriptBook,
        client: Any,
        model: str,
        temperature: float | None,
        *,
        first: int = 0,
        warmup: bool = False,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ):
        self.spec, self.book, self.client, self.model, self.temperature = spec, book, client, model, temperature
        self.first, self.warmup, self.sleep = first, warmup, sleep
        self.records: list[RequestRecord] = []
        self.answers: dict[int, list[str]] = {}
        self.scripts: dict[int, SessionScript] = {}
        self.planned: dict[int, list[RequestRecord]] = {}  # an open loop's records, by session

    def _record(self, script: SessionScript, t: int, due: float) -> RequestRecord:
        turn = script.turns[t]
        rec = RequestRecord(
            len(self.records), self.spec.class_of_turn(t + 1), due, 0, turn.output_tokens, warmup=self.warmup,
            session=script.index, turn=t + 1,
        )  # fmt: skip
        self.records.append(rec)
        return rec

    def plan(self, scripts: list[SessionScript]) -> None:
        """A record for every turn of `scripts`, before any is sent."""
        for script in scripts:
            self.planned[script.index] = [self._record(script, t, math.nan) for t in range(len(script.turns))]

    def script(self, i: int) -> SessionScript:
        """The run's i-th session (the workload's session first + i), built once."""
        index = self.first + i
        if index not in self.scripts:
            self.scripts[index] = self.book.script(index)
        return self.scripts[index]

    async def run_session(self, script: SessionScript, start: SessionStart) -> None:
        answers = self.answers.setdefault(script.index, [])
        due = start.scheduled_time if start.scheduled_time == start.scheduled_time else time.perf_counter()
        planned = self.planned.get(script.index)
        for t, turn in enumerate(script.turns):
            rec = planned[t] if planned is not None else self._record(script, t, due)
            rec.scheduled_time, rec.answer = due, []
            messages = turn_messages(script, answers, t)
            request = Request(rec.index, rec.class_name, 0, turn.output_tokens, 0, messages=tuple(messages))
            await self.client.send(self.client.prepare(request, self.model, self.temperature), rec)
            if not rec.ok:
                return
            answers.append("".join(rec.answer or ()))
            rec.answer = None  # the text lives in `answers`, once
            if t + 1 < len(script.turns):
                await self.sleep(turn.think_s)
                due = time.perf_counter()

    async def open_loop(self, offsets: list[float], draining: Draining | None = None) -> tuple[float, float]:
        """Session i starts at offsets[i]; wait for every session (as `run_open_loop`)."""
        scripts = [self.script(i) for i in range(len(offsets))]
        self.plan(scripts)
        starts = [SessionStart() for _ in offsets]
        return await run_open_loop(self.run_session, scripts, starts, offsets, draining)

    async def closed_loop(self, users: int, sessions: int | None, duration_s: float | None) -> tuple[float, float, int]:
        """`users` users, each starting its next session when its last one ended."""

        def get(i: int) -> tuple[SessionScript, SessionStart]:
            return self.script(i), SessionStart()

        return await run_closed_loop(self.run_session, get, users, sessions, duration_s)

    def _sent(self) -> list[RequestRecord]:
        return [r for r in self.records if r.send_time == r.send_time]

    def sent_prompts(self) -> list[Messages]:
        """Every turn's prompt, in the order the turns were sent."""
        out = []
        for rec in sorted(self._sent(), key=lambda r: r.send_time):
            if rec.session is not None and rec.turn is not None:
                script = self.scripts[rec.session]
                out.append(turn_messages(script, self.answers[rec.session], rec.turn - 1))
        return out

    def report(
        self, tokenizer: PromptTokenizer, after: MetricsSnapshot | None, before: SessionRunner | None = None
    ) -> SessionReport:
        """The run's sessions, turns and the reuse share they imply (counted with the local chat
        template, in the server's KV blocks as its /metrics states them; `before`'s turns, a
        warm-up, fill the cache first)."""
        sent = self._sent()
        ended = {r.session for r in sent if not r.ok}
        started = {r.session for r in sent if r.session is not None}
        completed = sum(
            1 for i in started if i not in ended and len(self.answers.get(i, ())) == len(self.scripts[i].turns)
        )
        block = _block_size(after)
        share = float("nan")
        if block is not None and tokenizer.can_render_chat:
            seed = before.sent_prompts() if before is not None else []
            prompts = [tokenizer.encode(tokenizer.render_chat(m)) for m in [*seed, *self.sent_prompts()]]
            share = cached_prefix_share(prompts, block, counted_from=len(seed))
        return SessionReport(len(started), completed, turn_stats(self.records), share, block)


def _block_size(snapshot: MetricsSnapshot | None) -> int | None:
    """The server's KV block size, from its `vllm:cache_config_info` labels."""
    rows = snapshot.samples.get(CACHE_CONFIG_INFO) if snapshot is not None else None
    for labels, _ in rows or ():
        value = labels.get("block_size")
        if value and value.isdigit():
            return int(value)
    return None
