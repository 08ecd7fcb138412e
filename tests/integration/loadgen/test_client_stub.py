"""Both clients against the stub server: pinned timing measured right, failures counted not crashed.

Tolerance for pinned timing: the stub's timers fire up to ~1 ms late, HTTP parsing and the
GIL (the stub runs on a thread of this process) add a little, so measured TTFT/E2EL may
exceed the pinned value by up to TOL_MS and are never below it; per-chunk gaps and TPOT are
within TOL_GAP_MS of the pinned gap (a late chunk shortens the next gap).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadgen import CLIENT_BEHIND, LoadOptions
from loadgen.arrivals import open_loop_offsets
from loadgen.loadrun import run_load_sync
from loadgen.prompts import build_requests
from loadgen.request_record import CONNECTION, HTTP_ERROR, NO_TOKEN, STREAM_ERROR, TIMEOUT, TRUNCATED
from loadgen.tokenizer import PromptTokenizer
from loadgen.workload import WorkloadSpec
from tests.support.stub_server import StubConfig, StubServer
from tests.support.tiny_tokenizer import build_tiny_tokenizer

TOL_MS = 20.0
TOL_GAP_MS = 4.0
CLIENTS = ["aiohttp", "openai"]


def stub(tok_dir, tok, **kw) -> StubServer:
    return StubServer(StubConfig(root=str(tok_dir), **kw), tokenizer=tok)


def workload(**kw) -> WorkloadSpec:
    data = {
        "endpoint": "completions",
        "prompt_tokens": 40,
        "output_tokens": 12,
        "arrival": {"mode": "closed", "concurrency": 2},
        "num_requests": 12,
    }
    data.update(kw)
    return WorkloadSpec.model_validate(data)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_pinned_ttft_and_gaps_are_measured(tok_dir, tok, client, endpoint):
    with stub(tok_dir, tok, ttft_ms=40, itl_ms=10) as s:
        r = run_load_sync(s.base_url, None, workload(endpoint=endpoint), options=LoadOptions(client=client))
    m = r.flat()
    assert m["completed"] == 12 and m["failed"] == 0
    assert 40 <= m["ttft_median_ms"] <= 40 + TOL_MS
    assert min(x.ttft for x in r.records) * 1000 >= 40
    assert m["ttft_p90_ms"] <= 40 + 3 * TOL_MS
    assert abs(m["tpot_median_ms"] - 10) <= TOL_GAP_MS
    assert abs(m["itl_median_ms"] - 10) <= TOL_GAP_MS
    assert 150 <= m["e2el_median_ms"] <= 150 + TOL_MS  # 40 + 11 x 10
    assert r.metrics.total_output_tokens == 12 * 12
    assert all(len(x.chunk_times) == 12 for x in r.records)
    assert all(x.prompt_tokens == x.expected_prompt_tokens == 40 for x in r.records)


@pytest.mark.parametrize("client", CLIENTS)
def test_chat_role_opener_is_not_the_first_token(tok_dir, tok, client):
    with stub(tok_dir, tok, ttft_ms=80, itl_ms=5, role_at_arrival=True) as s:
        r = run_load_sync(
            s.base_url, None, workload(endpoint="chat", num_requests=4), options=LoadOptions(client=client)
        )
    assert r.metrics.completed == 4
    assert r.flat()["ttft_median_ms"] >= 80


SHAPES = [
    ("aiohttp", {"comments": True}),
    ("aiohttp", {"split_chunks": True}),
    ("aiohttp", {"crlf": True}),
    ("aiohttp", {"comments": True, "crlf": True, "split_chunks": True}),
    ("aiohttp", {"empty_final_delta": True}),
    ("openai", {"empty_final_delta": True}),
]


@pytest.mark.parametrize("client, shape", SHAPES)
def test_sse_keepalives_split_reads_crlf_and_empty_deltas(tok_dir, tok, client, shape):
    """(SSE framing in the openai client is the SDK's; the token rule is ours in both.)"""
    with stub(tok_dir, tok, ttft_ms=30, itl_ms=8, **shape) as s:
        r = run_load_sync(
            s.base_url, None, workload(endpoint="chat", num_requests=6), options=LoadOptions(client=client)
        )
    m = r.flat()
    assert m["completed"] == 6 and all(len(x.chunk_times) == 12 for x in r.records)
    assert 30 <= m["ttft_median_ms"] <= 30 + TOL_MS
    assert abs(m["itl_median_ms"] - 8) <= TOL_GAP_MS


FAULTS = {
    3: "http:503",
    4: "truncate:2",
    5: "eof:2",
    6: "error_event",
    7: "no_token",
    8: "stall",
    9: "drop",
    10: "stall_headers",
}
EXPECTED = {
    "http503": HTTP_ERROR,
    "truncate": TRUNCATED,
    "eof": TRUNCATED,
    "error_event": STREAM_ERROR,
    "no_token": NO_TOKEN,
    "stall": TIMEOUT,
    "drop": CONNECTION,
    "stall_headers": TIMEOUT,
}


@pytest.mark.parametrize("client", CLIENTS)
def test_errors_timeouts_and_truncated_streams_are_counted(tok_dir, tok, client):
    names = {
        3: "http503",
        4: "truncate",
        5: "eof",
        6: "error_event",
        7: "no_token",
        8: "stall",
        9: "drop",
        10: "stall_headers",
    }
    classes = [{"name": "ok", "weight": 4, "prompt_tokens": 20, "output_tokens": 12}]
    classes += [{"name": names[k], "weight": 1, "prompt_tokens": 20, "output_tokens": k} for k in FAULTS]
    spec = WorkloadSpec.model_validate(
        {
            "classes": classes,
            "arrival": {"mode": "closed", "concurrency": 12},
            "num_requests": 60,
            "request_timeout_s": 1.0,
            "seed": 4,
        }
    )
    with stub(tok_dir, tok, ttft_ms=5, itl_ms=2, faults_by_max_tokens=FAULTS) as s:
        r = run_load_sync(s.base_url, None, spec, options=LoadOptions(client=client))
    f = r.flat()
    sent = {c: sum(1 for x in r.records if x.class_name == c) for c in r.spec.class_names}
    assert f["completed"] == f["completed@ok"] == sent["ok"] > 0
    assert f["failed"] == 60 - sent["ok"]
    assert f["error_rate"] == pytest.approx((60 - sent["ok"]) / 60)
    for name, kind in EXPECTED.items():
        recs = [x for x in r.records if x.class_name == name]
        assert recs, name
        assert {x.error_kind for x in recs} == {kind}, name
        assert f[f"failed@{name}"] == len(recs) and f[f"completed@{name}"] == 0
        # a failed request is no latency value: it counts above every measured one, so a median
        # that only failed requests reach is unknown, never a number made up for them
        assert np.isnan(f[f"ttft_median_ms@{name}"])
    assert np.isfinite(f["ttft_median_ms@ok"])  # the served class keeps its measured value
    assert all(x.status == 503 for x in r.records if x.class_name == "http503")
    assert sum(r.metrics.error_kinds.values()) == f["failed"]


@pytest.mark.parametrize("client", CLIENTS)
def test_no_hidden_connection_cap(tok_dir, tok, client):
    """130 users at once: aiohttp's default connector (limit 100) would cap them."""
    spec = workload(output_tokens=1, arrival={"mode": "closed", "concurrency": 130}, num_requests=130)
    with stub(tok_dir, tok, ttft_ms=2500, itl_ms=1) as s:
        r = run_load_sync(s.base_url, None, spec, options=LoadOptions(client=client, scrape_metrics=False))
        peak = s.stats.max_in_flight
    assert r.metrics.completed == 130 and peak == 130


def test_open_loop_follows_the_schedule_and_records_lag(tok_dir, tok):
    spec = workload(arrival={"mode": "gamma", "rate": 80, "burstiness": 0.5}, num_requests=120, seed=7)
    with stub(tok_dir, tok, ttft_ms=10, itl_ms=2) as s:
        r = run_load_sync(s.base_url, None, spec)
    due = np.array([x.scheduled_time - r.start for x in sorted(r.records, key=lambda x: x.index)])
    assert np.allclose(due, open_loop_offsets(spec.arrival, 120, None, 7), atol=1e-9)
    lags = [x.schedule_lag for x in r.records]
    assert min(lags) >= 0
    f = r.flat()
    assert f["schedule_lag_p99_ms"] == pytest.approx(np.percentile(np.array(lags) * 1000, 99))
    assert f[CLIENT_BEHIND] == float(f["schedule_lag_p99_ms"] > 5.0)
    # the run lasts from the schedule's start to the last response (drain included)
    assert r.duration_s >= due[-1]


def test_warmup_goes_first_and_is_excluded(tok_dir, tok):
    spec = workload(warmup_requests=5, num_requests=10)
    with stub(tok_dir, tok, ttft_ms=5, itl_ms=1) as s:
        r = run_load_sync(s.base_url, None, spec)
        received = s.stats.requests
    assert received == 15
    assert len(r.records) == 10 and len(r.warmup_records) == 5
    assert all(w.warmup and w.end_time <= r.start for w in r.warmup_records)
    assert r.metrics.completed == 10


def test_server_metrics_are_deltas_over_the_measured_run(tok_dir, tok):
    spec = workload(warmup_requests=3, num_requests=20, arrival={"mode": "closed", "concurrency": 4})
    with stub(tok_dir, tok, ttft_ms=300, itl_ms=20) as s:
        r = run_load_sync(s.base_url, None, spec, options=LoadOptions(sample_period_s=0.2))
    f = r.flat()
    assert f["server_generation_tokens"] == 20 * 12  # warmup tokens excluded
    assert f["server_prompt_tokens"] == 20 * 40
    assert f["server_requests_succeeded"] == 20
    assert f["server_prefix_cache_hit_rate"] == pytest.approx(0.5)
    assert f["server_running_peak"] == 4 and f["server_samples"] >= 5
    assert f["server_queue_time_mean_ms"] == pytest.approx(0.5)


def test_duration_bounded_closed_loop(tok_dir, tok):
    spec = workload(num_requests=None, duration_s=1.0, arrival={"mode": "closed", "concurrency": 3})
    with stub(tok_dir, tok, ttft_ms=20, itl_ms=2) as s:
        r = run_load_sync(s.base_url, None, spec)
    assert len(r.records) > 10
    assert all(x.send_time - r.start <= 1.0 for x in r.records)
    assert r.metrics.completed == len(r.records)


def test_chat_prompts_are_realigned_when_the_server_template_differs(tok_dir, tmp_path):
    other = build_tiny_tokenizer(tmp_path / "other")
    (other / "chat_template.jinja").write_text(
        "{% for m in messages %}<<{{ m['role'] }}>> {{ m['content'] }} <<end>>\n{% endfor %}"
        "{% if add_generation_prompt %}<<assistant>> {% endif %}"
    )
    server_tok = PromptTokenizer.load(other)
    spec = workload(endpoint="chat", prompt_tokens={"dist": "uniform", "low": 60, "high": 120}, num_requests=10, seed=3)
    with StubServer(StubConfig(root=str(tok_dir), ttft_ms=5, itl_ms=1), tokenizer=server_tok) as s:
        r = run_load_sync(s.base_url, None, spec)
    assert any("aligned with /tokenize" in n for n in r.notes)
    assert all(x.prompt_tokens == x.expected_prompt_tokens for x in r.records)
    assert {x.expected_prompt_tokens for x in r.records} == {
        x.target_prompt_tokens for x in build_requests(spec, PromptTokenizer.load(tok_dir))
    }


def test_load_cli_prints_a_table_and_writes_json(tok_dir, tok, tmp_path, capsys):
    from app.cli import main

    out = tmp_path / "run.json"
    with stub(tok_dir, tok, ttft_ms=5, itl_ms=1) as s:
        rc = main(
            [
                "load",
                "--url",
                s.base_url,
                "--concurrency",
                "2",
                "--num-requests",
                "6",
                "--prompt-tokens",
                "30",
                "--output-tokens",
                "4",
                "--json",
                str(out),
                "--records",
            ]
        )
    assert rc == 0
    text = capsys.readouterr().out
    assert "TTFT" in text and "request throughput" in text
    data = json.loads(out.read_text())
    assert data["metrics"]["completed"] == 6 and len(data["records"]) == 6


def test_load_cli_json_that_cannot_be_written_is_one_line_and_exit_3(tok_dir, tok, tmp_path, capsys):
    from app.cli import EXIT_OUTPUT_MISSING, main

    (tmp_path / "not-a-dir").write_text("a file")
    out = tmp_path / "not-a-dir" / "run.json"
    with stub(tok_dir, tok, ttft_ms=5, itl_ms=1) as s:
        rc = main(
            [
                "load",
                "--url",
                s.base_url,
                "--concurrency",
                "2",
                "--num-requests",
                "4",
                "--prompt-tokens",
                "30",
                "--output-tokens",
                "4",
                "--json",
                str(out),
                "--quiet",
            ]
        )
    assert rc == EXIT_OUTPUT_MISSING
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"autotune: not written: {out}: File exists (") and line.endswith(f" free in {out.parent})")


def test_load_cli_resolves_a_capacity_fraction(tok_dir, tok, tmp_path, capsys):
    from app.cli import main
    from search.scenario import Calibration

    scenario = tmp_path / "sc.yaml"
    scenario.write_text(
        json.dumps(
            {  # a whole scenario: the load command validates it as a study does
                "name": "x",
                "title": "x",
                "objectives": [{"metric": "goodput", "direction": "maximize"}],
                "search_space": {"max_num_seqs": {"low": 1, "high": 4}},
                "goodput": {"ttft_ms": 1000, "tpot_ms": {"x_unloaded": 3}},
                "workload": {
                    "endpoint": "completions",
                    "prompt_tokens": 30,
                    "output_tokens": 4,
                    "arrival": {"mode": "poisson", "capacity_fraction": 0.5},
                    "num_requests": 8,
                },
            }
        )
    )
    out = tmp_path / "run.json"
    with stub(tok_dir, tok, ttft_ms=5, itl_ms=1) as s:
        assert (
            main(["load", str(scenario), "--url", s.base_url, "--capacity", "40", "--json", str(out), "--quiet"]) == 0
        )
        data = json.loads(out.read_text())
        assert data["workload"]["arrival"]["rate"] == 20.0 and data["target_rate"] == 20.0
        assert data["metrics"]["completed"] == 8
        assert data["metrics"]["goodput"] == data["metrics"]["request_throughput"]  # ttft 1000 ms met
        received = s.stats.requests
        assert main(["load", str(scenario), "--url", s.base_url, "--json", str(out), "--quiet"]) == 0
        probed = s.stats.requests - received
    assert "measuring capacity first" in capsys.readouterr().out
    assert probed == 4 + Calibration().saturation_requests + 8  # probe warmup + probe + the run
    assert json.loads(out.read_text())["workload"]["arrival"]["rate"] > 0


def test_connections_are_opened_before_the_measured_run(tok_dir, tok):
    """About rate x warmup latency x 1.5 (+8) keep-alive connections are opened up front."""
    spec = workload(arrival={"mode": "poisson", "rate": 100}, num_requests=40, warmup_requests=4)
    with stub(tok_dir, tok, ttft_ms=200, itl_ms=1) as s:
        run_load_sync(s.base_url, None, spec, options=LoadOptions(scrape_metrics=False))
        pings = s.stats.health_checks
    assert pings >= 100 * 0.2 * 1.5 + 8


@pytest.mark.parametrize("client", CLIENTS)
def test_a_session_turn_resends_the_answers_the_server_streamed(tok_dir, tok, client):
    spec = WorkloadSpec.model_validate(
        {
            "endpoint": "chat",
            "arrival": {"mode": "poisson", "rate": 20.0},
            "num_requests": 9,
            "warmup_requests": 0,
            "sessions": {"turns": 3, "user_tokens": 10, "output_tokens": 4, "system_prompt_tokens": 12},
        }
    )
    with stub(tok_dir, tok, ttft_ms=5, itl_ms=2, record_bodies=True) as s:
        r = run_load_sync(s.base_url, None, spec, options=LoadOptions(client=client))
        bodies = s.stub.stats.bodies
    assert r.flat()["completed"] == 9 and r.sessions.sessions == 3 and r.sessions.completed == 3
    assert r.requests_planned == 9  # the scheduled sessions' turns
    assert [t.sent for t in r.sessions.turns] == [3, 3, 3]
    last_turns = [b["messages"] for b in bodies if len(b["messages"]) == 6]
    assert len(last_turns) == 3
    for messages in last_turns:  # system, then user/assistant twice, then the third question
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
        assert messages[2]["content"] == messages[4]["content"] == " tok" * 4  # what the stub streamed
    assert r.flat()["ttft_median_ms@later"] > 0 and r.to_json()["records"][0]["turn"] == 1
