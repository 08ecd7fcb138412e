"""What a load run returns (`LoadResult`): its records, metrics, the server's view and the
client's own cost, and the notes that say what the numbers alone do not (requests that were not
what was built, a client that fell behind its schedule)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from loadgen.load_options import Abort
from loadgen.metrics import RunMetrics
from loadgen.preparation import CLOSED_LOOP_BATCH
from loadgen.request_record import RequestRecord
from loadgen.server_metrics import GaugeSample, ServerDiagnostics
from loadgen.turn_metrics import SessionReport
from loadgen.workload import WorkloadSpec


@dataclass
class LoadResult:
    base_url: str
    model: str
    client: str
    spec: WorkloadSpec
    records: list[RequestRecord]  # measured requests that were sent
    warmup_records: list[RequestRecord]
    metrics: RunMetrics
    server: ServerDiagnostics | None
    start: float  # perf_counter at the start of the arrival schedule
    end: float  # ... when the last response ended
    notes: list[str] = field(default_factory=list)
    client_cpu_s: float = math.nan  # this process's CPU time over the measured window
    abort: Abort | None = None  # why the run stopped sending early (its outcome was certain)
    planned_s: float = math.nan  # the open loop's schedule: last arrival's offset
    requests_planned: int = 0  # an open loop's scheduled requests (sent or not)
    client_cpus: tuple[int, ...] | None = None  # the CPUs the client ran on, when restricted
    gauges: list[GaugeSample] = field(default_factory=list)  # the server's gauges over the run (about 1 Hz)
    sessions: SessionReport | None = None  # a session workload's turns and prefix reuse

    @property
    def client_cpu_share(self) -> float:
        """Client CPU over the run, in cores: near 1.0, the client itself was the bottleneck."""
        return self.client_cpu_s / self.duration_s if self.duration_s > 0 else math.nan

    @property
    def aborted(self) -> str | None:
        return self.abort.reason if self.abort is not None else None

    @property
    def duration_s(self) -> float:
        return self.end - self.start

    @property
    def target_rate(self) -> float | None:
        return self.spec.arrival.mean_rate()

    @property
    def achieved_send_rate(self) -> float:
        """Requests sent per second over the sending window (first to last send)."""
        sends = sorted(r.send_time for r in self.records)
        if len(sends) < 2 or sends[-1] <= sends[0]:
            return math.nan
        return (len(sends) - 1) / (sends[-1] - sends[0])

    def flat(self) -> dict[str, float]:
        return self.metrics.flat()

    flat_metrics = flat

    def server_diagnostics(self) -> dict[str, float]:
        """The server's view (deltas, gauge peaks); empty if /metrics was not scraped."""
        return asdict(self.server) if self.server is not None else {}

    def to_json(self, include_records: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "base_url": self.base_url,
            "model": self.model,
            "client": self.client,
            "workload": self.spec.model_dump(mode="json"),
            "target_rate": self.target_rate,
            "achieved_send_rate": self.achieved_send_rate,
            "metrics": self.flat(),
            "error_kinds": self.metrics.error_kinds,
            "total_input_tokens": self.metrics.total_input_tokens,
            "total_output_tokens": self.metrics.total_output_tokens,
            "notes": self.notes,
            "client_cpu_s": self.client_cpu_s,
            "client_cpu_share": self.client_cpu_share,
            "client_cpu_s_per_request": self.client_cpu_s / max(1, len(self.records)),
            "aborted": self.aborted,
            "planned_s": self.planned_s,
            # perf_counter is CLOCK_MONOTONIC on Linux: comparable with other processes' clocks.
            "start_perf": self.start,
            "end_perf": self.end,
            "client_cpus": list(self.client_cpus) if self.client_cpus is not None else None,
            "abort_margin": self.abort.margin if self.abort is not None else None,
        }
        if self.sessions is not None:
            out["sessions"] = self.sessions.to_json()
        if include_records:
            out["records"] = [r.to_dict(self.start) for r in self.records]
        return out


def request_notes(spec: WorkloadSpec, extended_batches: int, records: list[RequestRecord]) -> list[str]:
    """Notes on the measured requests: the trace's clipped ones, those a duration-bounded closed
    loop built during the run (`extended_batches` batches), and those whose prompt or output
    length differs from what was built."""
    notes = []
    if spec.trace is not None and spec.trace.clipped_requests:
        notes.append(
            f"{spec.trace.clipped_requests} of the trace's {len(spec.trace.trace)} requests are clipped to "
            f"{spec.trace.max_total_tokens} tokens (prompt + output, trace.max_total_tokens)"
        )
    if extended_batches:
        notes.append(
            f"closed loop built {extended_batches * CLOSED_LOOP_BATCH} extra requests during "
            "the run (duration-bounded); their chat lengths were counted locally"
        )
    mismatched = sum(
        1
        for r in records
        if r.session is None and r.prompt_tokens is not None and r.prompt_tokens != r.expected_prompt_tokens
    )
    if mismatched:
        notes.append(f"{mismatched} requests: the server counted a different prompt length than built")
    short = sum(
        1
        for r in records
        if r.ok and r.completion_tokens is not None and r.completion_tokens != r.expected_output_tokens
    )
    if short:
        notes.append(
            f"{short} requests got a different output length than max_tokens "
            "(prompt + output > max_model_len truncates silently)"
        )
    return notes


def client_behind_note(result: LoadResult, lag_limit_ms: float) -> str:
    """Why a run whose schedule lag passed `lag_limit_ms` offered less load than asked: the
    client's own CPU, or CPU it did not get."""
    share = result.client_cpu_share
    if share > 0.8:
        why = "the client itself is the bottleneck"
    else:
        why = "it was starved of CPU by other processes, or paused"
    return (
        f"client fell behind: p99 schedule lag {result.metrics.schedule_lag_p99_ms:.1f} ms > "
        f"{lag_limit_ms:g} ms, so the offered load was lower than asked (client CPU "
        f"{share:.0%} of a core: {why})"
    )
