"""Whether a server under load is alive, read over HTTP from its engine's gauges: alive before a
verdict (`liveness_before_verdict`, else `ServerHung`) and idle before the next load stage
(`wait_idle`). What the server owes and the one rule that calls it hung are `stall`'s
(`ProgressWatch`, `Stall`); this module reads the server and credits the progress it shows to
that watch.

**Alive.** Before what a load run measured is scored, the server shows it is alive, or the run is
a hang. Both this and the drain read the engine's `/metrics` gauges and credit the progress they
show to the watch by the same rules (`engine_moved`, `credit_idle`).

A server that stopped answering (its processes stopped, its engine deadlocked) looks, to a load
run, like a very slow one: the early abort sees requests over their bound and cuts the stage
short within seconds, long before the stall bound is reached, and the stage would be scored as
a certain SLO miss of a live configuration. So a run does not hand back its
result while the server owes it something without having shown progress: `liveness_before_verdict`
asks /health (within `HEALTH_TIMEOUT_S`), then reads the engine's gauges until they move, and raises
`ServerHung` once the watch's one rule says the server hung (`ProgressWatch.check`): silent for
the stall bound, or /health silent. A live server shows progress within a poll or two (it drops
the requests the abort cut off), so this costs a healthy run a fraction of a second, and a hung
one at most the stall bound.

Gauges that read idle prove nothing by themselves: the API server keeps the last figures its
engine sent, so an engine stopped between two requests reads idle for ever. An idle reading is
checked with one request of a single token (`engine_answers`), which only a live engine answers.

Every phase's load runs through it (`run_load`, given a watch): calibration, warm-up, target
and capacity stages, the confirmation's runs, and whatever else scores what a run measured.

**Idle.** Between load stages on one server, `wait_idle` waits until it has drained (its gauges
show nothing running or waiting), so a stage does not start behind what the one before left
queued.
"""

from __future__ import annotations

import asyncio
import math
import time

from loadgen.server_metrics import GaugeSample, scan_gauges
from loadgen.stall import ProgressWatch, Stall, traced
from vllm_http import BadStatus, TimedOut, Unanswered, fetch_metrics_text, get_health, served_models

HEALTH_TIMEOUT_S = 3.0  # an API server that answers nothing for this long is not serving
PROBE_TIMEOUT_S = 3.0  # for one read of /metrics
POLL_S = 0.25
IDLE_POLL_S = 0.25
METRICS_TIMEOUT_S = 5.0  # for one read of /metrics while waiting for the server to drain


class ServerHung(RuntimeError):
    """The server hung under a load run: `stall` says what was silent, for how long."""

    def __init__(self, stall: Stall):
        super().__init__(stall.describe())
        self.stall = stall


def health_silence(timeout_s: float = HEALTH_TIMEOUT_S) -> str:
    """The evidence that /health gave: it did not answer within `timeout_s`."""
    return f"/health did not answer within {timeout_s:g} s"


def engine_moved(seen: GaugeSample | None, now: GaugeSample) -> bool:
    """The engine's gauges changed since `seen` (requests let go of or taken up, KV blocks freed
    or filled). A hung engine's stand still."""
    if seen is None:
        return False
    return (seen.running, seen.waiting) != (now.running, now.waiting) or not (
        seen.kv_usage == now.kv_usage or (math.isnan(seen.kv_usage) and math.isnan(now.kv_usage))
    )


def reads_idle(gauges: GaugeSample) -> bool:
    return gauges.running == 0 and gauges.waiting == 0


async def engine_answers(session, base_url: str, timeout_s: float) -> bool:
    """Whether the engine generates a token for a one-token request within `timeout_s`: the
    evidence that gauges reading idle are the engine's present state, not the last figures a
    stopped engine sent. Asked only while the server owes the run something, so never under load."""
    import aiohttp

    try:
        model = (await served_models(session, base_url, timeout_s))[0]["id"]
        body = {"model": model, "prompt": "ok", "max_tokens": 1}
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with session.post(base_url + "/v1/completions", json=body, timeout=timeout) as resp:
            await resp.read()
            return resp.status == 200
    except (Unanswered, BadStatus, TimeoutError, aiohttp.ClientError, OSError, ValueError, KeyError, IndexError):
        return False


async def credit_idle(watch: ProgressWatch, session, base_url: str) -> bool:
    """Gauges read idle: if the server owes the run something, credit it with progress only once
    a one-token request shows its engine is live (idle now, not stopped idle). Whether it was."""
    if watch.owes(time.perf_counter()) and await engine_answers(session, base_url.rstrip("/"), watch.bound_s):
        watch.progress(time.perf_counter())
        return True
    return False


async def _health_answered(session, base_url: str, timeout_s: float) -> bool:
    """Whether /health gave any answer within `timeout_s`. A refused connection is an answer of
    sorts (the process is gone, which its watcher reports); only silence is evidence of a hang."""
    try:
        await get_health(session, base_url, timeout_s)
    except TimedOut:
        return False
    except Unanswered:  # refused or broken: the answer of a process that is gone
        pass
    return True


async def liveness_before_verdict(watch: ProgressWatch | None, base_url: str, session=None) -> None:
    """Return once the server owes the run nothing (it answered, or its engine moved since);
    raise `ServerHung` if it hung (see the module). `session`: an aiohttp session whose requests
    `watch` sees (`traced(watch)`); None: one of its own. Nothing to do without a watch."""
    if watch is None or not watch.owes(time.perf_counter()):
        return
    if session is None:
        import aiohttp

        async with aiohttp.ClientSession(trace_configs=traced(watch)) as own:
            await liveness_before_verdict(watch, base_url, own)
        return
    if not await _health_answered(session, base_url.rstrip("/"), HEALTH_TIMEOUT_S):
        stall = watch.check(time.perf_counter(), evidence=health_silence())
        if stall is not None:
            raise ServerHung(stall)
    seen: GaugeSample | None = None
    while True:
        now = time.perf_counter()
        stall = watch.check(now)
        if stall is not None:
            raise ServerHung(stall)
        if not watch.owes(now):
            return
        text = await fetch_metrics_text(session, base_url.rstrip("/"), timeout_s=PROBE_TIMEOUT_S)
        if text is not None:
            gauges = scan_gauges(text)
            if math.isnan(gauges.running):  # no engine gauges to read: /health answered, that is all
                return
            if engine_moved(seen, gauges):
                watch.progress(gauges.t)
                continue
            if reads_idle(gauges) and await credit_idle(watch, session, base_url):
                continue
            seen = gauges
        await asyncio.sleep(POLL_S)


async def wait_idle(base_url: str, timeout_s: float, watch: ProgressWatch | None = None) -> tuple[float, str | None]:
    """Wait until the server runs and queues nothing. (seconds waited, a note if it never did).

    `watch` sees the polls, and the engine's progress they show: gauges that moved (requests
    let go of, KV blocks freed), or gauges at idle with a one-token request answered. A hung
    engine's gauges stand still, so the requests an aborted stage cut off stay owed."""
    import aiohttp

    t0 = time.perf_counter()
    seen: GaugeSample | None = None
    async with aiohttp.ClientSession(trace_configs=traced(watch)) as session:
        while True:
            text = await fetch_metrics_text(session, base_url, timeout_s=METRICS_TIMEOUT_S)
            if text is None:
                return time.perf_counter() - t0, "no /metrics: did not wait for the server to drain"
            g = scan_gauges(text)
            if math.isnan(g.running):
                return time.perf_counter() - t0, "no request gauges in /metrics: did not wait to drain"
            if watch is not None and engine_moved(seen, g):
                watch.progress(g.t)
            if reads_idle(g):
                if watch is not None:
                    await credit_idle(watch, session, base_url)
                return time.perf_counter() - t0, None
            seen = g
            waited = time.perf_counter() - t0
            if waited > timeout_s:
                return waited, (
                    f"server still busy after {timeout_s:g} s ({g.running:.0f} running, "
                    f"{g.waiting:.0f} waiting): the next stage starts anyway"
                )
            await asyncio.sleep(IDLE_POLL_S)
