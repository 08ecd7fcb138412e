"""`autotune scenario from-trace` on a trace of sessions: a sessions workload fitted to them, what
it prints, the shipped example, and bad session columns in one line."""

from __future__ import annotations

import json

import yaml

from app.cli import main
from benchmarks.sessions_synthetic import SHIPPED, sessions_jsonl
from loadgen import read_sessions
from search import scenario as scenario_mod
from search.session_scenario import scenario_from_trace


def test_the_shipped_example_is_the_generators_output():
    assert SHIPPED.read_text() == sessions_jsonl()
    assert read_sessions(SHIPPED).sessions == 40


def test_from_trace_on_the_shipped_example_writes_a_sessions_scenario(tmp_path, capsys):
    out = tmp_path / "sessions.yaml"
    assert main(["scenario", "from-trace", str(SHIPPED), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for needle in (
        "40 sessions, 165 turns",
        "turns per session: median 4, 2-8",
        "think times: median",
        "upper bounds",
        "prompt tokens repeated from earlier turns: 81%",
        "closest shipped sessions scenario: chat_sessions",
    ):
        assert needle in printed
    sc = scenario_mod.load(out)[0]
    assert isinstance(sc, scenario_mod.Scenario)
    wl = sc.workload
    assert wl.sessions is not None and wl.trace is None and wl.endpoint == "chat"
    assert wl.arrival.mode == "poisson" and wl.arrival.capacity_fraction == 0.5
    found = read_sessions(SHIPPED)
    for dist, observed in ((wl.sessions.turns, found.turns), (wl.sessions.user_tokens, found.user_tokens)):
        assert observed.min() <= dist.lower_bound() and dist.upper_bound() <= observed.max()
    assert wl.sessions.think_time_s.dist == "exponential" and 5 < wl.sessions.think_time_s.mean_s < 10
    assert wl.sessions.system_prompt_tokens == 180
    assert wl.longest_request_tokens() <= sc.server.fixed["max_model_len"]
    assert {o.metric for o in sc.objectives} >= {"ttft_p95_ms@later"}  # the turn classes kept


def test_an_objective_keeps_the_turn_class(tmp_path):
    data = yaml.safe_load(scenario_from_trace(SHIPPED, tmp_path / "l.yaml", "latency")[0])
    assert data["selection"] == {
        "rule": "best_of",
        "metric": "ttft_p95_ms@later",
        "tolerance": 0.1,
        "then": "slo_capacity_rps",
    }


def test_a_sharegpt_file_of_conversations_is_fitted_without_think_times(tmp_path, capsys):
    chat = [{"from": "human", "value": "word " * 40}, {"from": "gpt", "value": "word " * 60}] * 3
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps([{"conversations": chat}, {"conversations": chat[:2]}]))
    assert main(["scenario", "from-trace", str(path), "--out", str(tmp_path / "g.yaml")]) == 0
    printed = capsys.readouterr().out
    assert "think times: none in the file" in printed and "words x 1.3" in printed
    sessions = scenario_mod.load(tmp_path / "g.yaml")[0].workload.sessions
    assert sessions.think_time_s.mean_s == 0 and sessions.turns.upper_bound() == 3
    assert sessions.user_tokens.dist == "fixed" and sessions.user_tokens.value == 52  # 40 words x 1.3


def test_turns_are_capped_to_fit_the_context_and_it_says_so(tmp_path, capsys):
    rows, t = [], 0.0
    for s in range(6):
        before = 0
        for turn in range(1, 3 + 2 * s):
            rows.append(
                {"timestamp": t, "session_id": s, "turn": turn, "prompt_tokens": before + 300, "output_tokens": 200}
            )
            before += 500
            t += 1.0
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "c.yaml"
    assert main(["scenario", "from-trace", str(path), "--out", str(out), "--context", "4096"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("turns capped"))
    assert "the trace has up to 12" in line and "--context" in line
    sc = scenario_mod.load(out)[0]
    assert sc.workload.longest_request_tokens() <= 4096 < read_sessions(path).turns.max() * 500


def test_a_trace_of_one_turn_sessions_is_replayed_as_before(tmp_path):
    path = tmp_path / "one.jsonl"
    path.write_text(
        "".join(
            json.dumps({"timestamp": i, "session_id": i, "prompt_tokens": 50, "output_tokens": 9}) + "\n"
            for i in range(5)
        )
    )
    data = yaml.safe_load(scenario_from_trace(path, tmp_path / "o.yaml")[0])
    assert data["workload"]["arrival"]["mode"] == "trace" and "sessions" not in data["workload"]


def test_bad_session_columns_are_one_line_and_exit_2(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    rows = [
        {"timestamp": 0, "session_id": "a", "turn": 1, "prompt_tokens": 10, "output_tokens": 5},
        {"timestamp": 1, "session_id": "a", "turn": 1, "prompt_tokens": 20, "output_tokens": 5},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "x.yaml"
    assert main(["scenario", "from-trace", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert str(path) in err and "row 2" in err and "turn 1 of session 'a' repeats" in err
    assert not out.exists()
