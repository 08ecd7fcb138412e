"""Our request records through vLLM's own calculate_metrics give our metrics (vLLM imported, no
server started).
"""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.metrics import GoodputSLO, compute_metrics
from loadgen.request_record import HTTP_ERROR, RequestRecord


def rec(
    send: float,
    ttft: float,
    gaps: list[float],
    *,
    tokens: int | None = None,
    cls: str = "a",
    scheduled: float | None = None,
    prompt: int = 100,
    warmup: bool = False,
    error: str | None = None,
    index: int = 0,
) -> RequestRecord:
    r = RequestRecord(
        index, cls, send if scheduled is None else scheduled, prompt, tokens or len(gaps) + 1, warmup=warmup
    )
    r.send_time = send
    t = send + ttft
    r.chunk_times = [t]
    for g in gaps:
        t += g
        r.chunk_times.append(t)
    r.first_token_time = r.chunk_times[0]
    r.end_time = r.chunk_times[-1] + 0.001
    r.completion_tokens = tokens if tokens is not None else len(gaps) + 1
    r.prompt_tokens = prompt
    if error:
        r.error_kind = error
    return r


@pytest.mark.vllm
def test_same_numbers_as_vllm_calculate_metrics():
    """Our records through vLLM's own `calculate_metrics` give our metrics (same definitions)."""
    from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput
    from vllm.benchmarks.serve import calculate_metrics

    rng = np.random.default_rng(0)
    records = []
    for i in range(60):
        n = int(rng.integers(1, 40))
        r = rec(
            i * 0.05,
            float(rng.uniform(0.02, 0.5)),
            list(rng.uniform(0.005, 0.05, n - 1)),
            tokens=n + int(rng.integers(0, 3)),
            prompt=int(rng.integers(10, 300)),
            index=i,
        )
        if i % 13 == 0:
            r.error_kind = HTTP_ERROR
        records.append(r)
    outputs = []
    for r in records:
        o = RequestFuncOutput(
            success=r.ok, prompt_len=r.prompt_tokens, start_time=r.send_time, output_tokens=r.completion_tokens
        )
        if r.ok:
            o.ttft, o.latency = r.ttft, r.e2el
            o.itl = list(np.diff(r.chunk_times))
        outputs.append(o)
    theirs, _ = calculate_metrics(
        input_requests=[None] * len(outputs),
        outputs=outputs,
        dur_s=7.5,
        tokenizer=None,
        selected_percentiles=[90, 95, 99],
        goodput_config_dict={"ttft": 300.0, "tpot": 30.0},
    )
    ours = compute_metrics(records, 7.5, GoodputSLO(ttft_ms=300, tpot_ms=30)).flat()
    assert ours["completed"] == theirs.completed and ours["failed"] == theirs.failed
    for name in ("request_throughput", "output_throughput", "total_token_throughput"):
        assert ours[name] == pytest.approx(getattr(theirs, name))
    assert ours["goodput"] == pytest.approx(theirs.request_goodput)
    for m in ("ttft", "tpot", "itl", "e2el"):
        assert ours[f"{m}_mean_ms"] == pytest.approx(getattr(theirs, f"mean_{m}_ms"))
        assert ours[f"{m}_median_ms"] == pytest.approx(getattr(theirs, f"median_{m}_ms"))
        for p, v in getattr(theirs, f"percentiles_{m}_ms"):
            assert ours[f"{m}_p{int(p)}_ms"] == pytest.approx(v)
