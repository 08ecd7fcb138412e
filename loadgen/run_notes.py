"""What a load run's numbers alone do not say, in the notes of its result: requests that were
not what was built (clipped, built during the run, counted or answered at another length), and
a client that fell behind its schedule, with the likely reason."""

from __future__ import annotations

from loadgen.load_result import LoadResult
from loadgen.preparation import CLOSED_LOOP_BATCH
from loadgen.records import RequestRecord
from loadgen.workload import WorkloadSpec


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
