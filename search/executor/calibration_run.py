"""The calibration measured on a real server, as a trial is: the vLLM-defaults baseline's server
started and warmed up under the saturating load, then `repeats` rounds of each request class alone
one request at a time (the unloaded medians) and the whole mix in a saturating closed loop (the
capacity), the prefix cache reset before each, the server watched throughout.

What the result means and how a scenario's relative numbers resolve against it is pure and
lives in `search.calibration`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen import (
    LATENCY_FAMILIES,
    LoadOptions,
    LoadResult,
    MetricName,
    ProgressWatch,
    ThinkTime,
    WorkloadSpec,
    class_key,
    run_async,
    run_load,
    stall_bound_s,
    timed_tpot_median_ms,
)
from search.calibration import MIN_TIMED_SHARE, CalibrationResult, closed_workload, saturation_workload
from search.scenario import Calibration, Scenario
from serving import FailurePhase, LaunchContext, ServerArgs
from serving.process import ServerFailed, launch, while_serving
from vllm_http import RESET_ENDPOINT_ENV, reset_prefix_cache

# The stall bound of the calibration's first loads, before any class's unloaded TTFT is known: one
# long prompt alone may take this long on a slow CPU (a 2,600-token prefill at 200 tokens/s is 13 s,
# past the 15 s floor with a scheduling hiccup: seen on a 2-core CPU three times slower than usual).
FIRST_STALL_BOUND_S = 60.0


class CalibrationFailed(RuntimeError):
    """The calibration server failed, or the load generator did, before a reference was measured."""


@dataclass(frozen=True)
class WatchedServer:
    """The calibration's server as its loads reach it: its URL, the model it serves, the
    tokenizer that counts its tokens, and `watched`, which runs a load under the server's watch
    (a server that dies or hangs under it fails the calibration)."""

    url: str
    model: str
    tokenizer_path: Path
    watched: Callable[[Callable[[ProgressWatch], Any]], Any]

    def load(self, spec: WorkloadSpec) -> LoadResult:
        """`spec` run against the server, watched."""
        return self.watched(
            lambda watch: run_load(
                self.url, self.model, spec, options=LoadOptions(tokenizer_path=self.tokenizer_path, watch=watch)
            )
        )


def calibrate(
    scenario: Scenario,
    ctx: LaunchContext,
    baseline: ServerArgs,
    run_dir: Path,
    on_phase=lambda _: None,
    *,
    launcher=None,
) -> CalibrationResult:
    """Measure the reference on a server of `baseline`'s flags, watched as a trial's is: its
    death, or the load generator's error, raises CalibrationFailed naming the cause. `launcher`:
    as the executor's `launch` (None: `launch`; a benchmark's servers started side by side)."""
    on_phase("starting the vLLM-defaults server")
    server = (launcher or launch)(
        ctx,
        baseline,
        run_dir / "calibration" / "server.log",
        startup_timeout_s=scenario.server.startup_timeout_s,
        env=RESET_ENDPOINT_ENV,
    )
    try:
        with server:
            try:
                return _calibrate_on(server, scenario, ctx, on_phase)
            except ServerFailed:
                raise
            except Exception as e:  # the load generator's; but a server that died under it is the cause
                died = server.poll_failure(phase=FailurePhase.CALIBRATION)
                if died is not None:
                    raise ServerFailed(died) from e
                raise CalibrationFailed(f"the load generator failed: {type(e).__name__}: {e}") from e
    except ServerFailed as e:
        raise CalibrationFailed(
            f"the vLLM-defaults server failed: {e.failure.summary()} "
            f"(log: {e.failure.log_path or server.spec.log_path})"
        ) from e


def _calibrate_on(server, scenario: Scenario, ctx: LaunchContext, on_phase) -> CalibrationResult:
    t0 = time.monotonic()
    cal = scenario.calibration
    wl = scenario.workload
    model = str(ctx.model.path)
    rounds: list[dict[str, Any]] = []
    saturations: list[dict[str, float]] = []

    slowest_ttft_ms: list[float] = []  # each class's unloaded TTFT median, as the rounds measure them

    def watched(load):
        """`load(watch)`: a coroutine whose progress `watch` sees; a server that dies or hangs under
        it fails the calibration as it fails a trial. Its stall bound is a trial's (5 x the slowest
        unloaded TTFT) once a class has been measured; before that, what a long prefill on a slow
        machine can take (`FIRST_STALL_BOUND_S`)."""
        bound = stall_bound_s(max(slowest_ttft_ms)) if slowest_ttft_ms else FIRST_STALL_BOUND_S
        watch = ProgressWatch(bound)
        return run_async(while_serving(server, load(watch), phase=FailurePhase.CALIBRATION, watch=watch))

    target = WatchedServer(server.base_url, model, ctx.model.path, watched)
    for i in range(cal.warmup_rounds):
        on_phase(f"warming the server up (saturation load {i + 1}/{cal.warmup_rounds}, unmeasured)")
        target.load(saturation_workload(wl, cal))
    for i in range(cal.repeats):
        tag = f" (round {i + 1}/{cal.repeats})" if cal.repeats > 1 else ""
        # Every round replays the same requests (the warm-up's too): without a reset, a round's
        # prompts hit the prefix cache the loads before it filled, and read an unloaded TTFT and
        # a capacity many times better than a first load's (docs/results.md, "Calibration").
        after_load = i > 0 or cal.warmup_rounds > 0
        reset = watched(lambda watch: reset_prefix_cache(server.base_url, watch)) if after_load else None
        unloaded, timed = _unloaded(
            target,
            wl,
            cal,
            warmup=not after_load,
            on_phase=lambda text: on_phase(text + tag),
            measured=slowest_ttft_ms,
        )
        on_phase(f"saturation throughput{tag}")
        saturation = target.load(saturation_workload(wl, cal)).flat_metrics()
        saturations.append(saturation)
        rounds.append(
            {
                "capacity_rps": saturation["request_throughput"],
                "unloaded": unloaded,
                "decode_timed_share": timed,
                "prefix_cache_reset": reset,
            }
        )
    return CalibrationResult.from_rounds(rounds, saturations, time.monotonic() - t0, warmup_rounds=cal.warmup_rounds)


def _unloaded(
    server: WatchedServer,
    wl: WorkloadSpec,
    cal: Calibration,
    *,
    warmup: bool,
    on_phase,
    measured: list[float],
) -> tuple[dict[str, float | None], dict[str, float]]:
    """Each request class alone, one request at a time: its latency medians (and the overall
    medians, weighted by class share), and the share of each class's streams whose decode the
    client could time.

    The TPOT median is read from those timed streams only, and is None for a class whose streams
    mostly arrived in one read: on a fast CPU (bf16) short requests' tokens can reach the client
    in one read, a TPOT of 0 that times nothing, and a reference pulled down by such zeros makes
    a relative TPOT bound that even vLLM's defaults miss far below their capacity
    (docs/results.md, "Calibration")."""
    unloaded: dict[str, float | None] = {}
    timed_share: dict[str, float] = {}
    if wl.sessions is not None:
        return _unloaded_sessions(server, wl, cal, warmup=warmup, on_phase=on_phase, measured=measured)
    for i, cls in enumerate(wl.classes):
        on_phase(f"unloaded latency, class {cls.name}")
        spec = closed_workload(
            wl,
            1,
            cal.unloaded_requests,
            classes=[cls.model_copy(update={"weight": 1.0})],
            warmup=2 if warmup and i == 0 else 0,
        )
        result = server.load(spec)
        flat = result.flat_metrics()
        if math.isfinite(flat.get("ttft_median_ms", math.nan)):  # the later loads' stall bound
            measured.append(flat["ttft_median_ms"])
        tpot, timed_share[cls.name] = timed_tpot_median_ms(result.records)
        alone: dict[str, float | None] = {
            **flat,
            "tpot_median_ms": tpot if timed_share[cls.name] >= MIN_TIMED_SHARE else None,
        }
        for key, value in alone.items():
            if MetricName.parse(key).cls is None:
                unloaded[class_key(key, cls.name)] = value
                if len(wl.classes) == 1:
                    unloaded[key] = value
    if len(wl.classes) > 1:
        for fam in LATENCY_FAMILIES:
            medians = [(unloaded[class_key(f"{fam}_median_ms", c.name)], c.weight) for c in wl.classes]
            known = [(v, w) for v, w in medians if v is not None]
            total = sum(w for _, w in known)
            unloaded[f"{fam}_median_ms"] = sum(v * w / total for v, w in known) if known else None
    return unloaded, timed_share


def _unloaded_sessions(
    server: WatchedServer,
    wl: WorkloadSpec,
    cal: Calibration,
    *,
    warmup: bool,
    on_phase,
    measured: list[float],
) -> tuple[dict[str, float | None], dict[str, float]]:
    """`_unloaded` for sessions: a turn class cannot be sent alone (a later turn resends the
    earlier ones), so one user runs whole sessions, without think times (they change no
    latency of a lone user, only the time it takes), until every turn class holds about
    `unloaded_requests` turns; each class's medians are read from its turns."""
    assert wl.sessions is not None
    on_phase("unloaded latency, sessions one at a time")
    rarest = min(wl.sessions.class_weights().values()) or 1.0
    turns = math.ceil(cal.unloaded_requests / rarest)
    lone = wl.model_copy(update={"sessions": wl.sessions.model_copy(update={"think_time_s": ThinkTime(mean_s=0.0)})})
    spec = closed_workload(lone, 1, turns, warmup=2 if warmup else 0)
    result = server.load(spec)
    flat = result.flat_metrics()
    if math.isfinite(flat.get("ttft_median_ms", math.nan)):
        measured.append(flat["ttft_median_ms"])
    unloaded: dict[str, float | None] = {}
    timed_share: dict[str, float] = {}
    for name in wl.class_names:
        of_class = [r for r in result.records if r.class_name == name]
        tpot, timed_share[name] = timed_tpot_median_ms(of_class)
        for key, value in flat.items():
            parsed = MetricName.parse(key)
            if parsed.cls == name:
                unloaded[key] = value
        unloaded[class_key("tpot_median_ms", name)] = tpot if timed_share[name] >= MIN_TIMED_SHARE else None
    for key, value in flat.items():
        if MetricName.parse(key).cls is None:
            unloaded[key] = value
    return unloaded, timed_share
