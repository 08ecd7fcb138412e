"""Sessions in a trace: our JSONL's session_id/turn rows and ShareGPT conversations summarised
(turns, new user tokens, repeated tokens, think gaps), and bad session columns in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadgen import read_sessions
from loadgen.trace.formats import TraceError
from loadgen.trace.trace_sessions import APPROXIMATE_NOTE, SessionRow, jsonl_sessions, sharegpt_sessions


def jsonl(tmp_path, rows, name="s.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def row(t, sid, turn, prompt, output, **extra):
    out = {"timestamp": t, "prompt_tokens": prompt, "output_tokens": output, **extra}
    if sid is not None:
        out["session_id"] = sid
    if turn is not None:
        out["turn"] = turn
    return out


SYSTEM = {"prefix_id": "sys", "prefix_tokens": 40}
# Session "a" grows turn by turn; session 7 (an integer id) restarts its history at turn 2; the
# last row names no session: a session of one turn.
ROWS = [
    row(0.0, "a", 1, 100, 20, **SYSTEM),  # new: 100 - 40 (system)
    row(1.0, 7, 1, 50, 10),  # new: 50
    row(4.5, "a", 2, 150, 30, **SYSTEM),  # new: 150 - (100 + 20) = 30, repeated 120
    row(6.0, 7, 2, 55, 5),  # 55 <= 50 + 10: a fresh prompt, all new
    row(9.0, "a", 3, 200, 10, **SYSTEM),  # new: 200 - 180 = 20, repeated 180
    row(9.5, None, None, 80, 8),
]


def test_jsonl_session_rows_are_summarised_per_session_turn_and_gap(tmp_path):
    s = read_sessions(jsonl(tmp_path, ROWS))
    assert s is not None and s.format == "jsonl" and s.multi_turn
    assert s.sessions == 3
    assert s.turns.tolist() == [3, 2, 1]  # in order of first appearance
    assert s.system_tokens.tolist() == [40, 0, 0]
    # per turn, session by session
    assert s.user_tokens.tolist() == [60, 30, 20, 50, 55, 80]
    assert s.output_tokens.tolist() == [20, 30, 10, 10, 5, 8]
    assert s.repeated_tokens.tolist() == [0, 120, 180, 0, 0, 0]
    assert s.repeated_share == pytest.approx(300 / (100 + 150 + 200 + 50 + 55 + 80))
    # the gaps between a session's turns (upper bounds on the think time)
    assert s.think_s.tolist() == [4.5, 4.5, 5.0]
    assert s.span_s == 9.5


def test_turns_default_to_file_order_within_a_session(tmp_path):
    rows = [row(0, "x", None, 10, 5), row(2, "x", None, 20, 5), row(3, "x", None, 30, 5)]
    s = read_sessions(jsonl(tmp_path, rows))
    assert s.turns.tolist() == [3] and s.user_tokens.tolist() == [10, 5, 5] and s.think_s.tolist() == [2, 1]


def test_iso_timestamps_give_gaps_in_seconds(tmp_path):
    rows = [row("2026-01-05T09:00:00Z", "x", 1, 10, 5), row("2026-01-05T09:00:12.5Z", "x", 2, 20, 5)]
    assert read_sessions(jsonl(tmp_path, rows)).think_s.tolist() == [12.5]


def test_the_pure_summary_takes_rows_as_they_come():
    rows = [SessionRow(1, "a", 1, 0.0, 30, 5, 10), SessionRow(2, "a", 2, 3.0, 40, 5)]
    s = jsonl_sessions(rows, "mem")
    assert s.user_tokens.tolist() == [20, 5] and s.repeated_tokens.tolist() == [0, 35]


def test_a_trace_without_session_columns_has_no_sessions(tmp_path):
    assert read_sessions(jsonl(tmp_path, [row(0, None, None, 10, 5), row(1, None, None, 10, 5)])) is None
    csv = tmp_path / "a.csv"
    csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n")
    assert read_sessions(csv) is None


SHAREGPT = [
    {
        "id": "a",
        "conversations": [
            {"from": "system", "value": "you are a helpful bot"},  # 5 words: 7 tokens
            {"from": "human", "value": "what is the capital of france"},  # 6 words: 8
            {"from": "gpt", "value": "paris"},  # 1 word: 2
            {"from": "human", "value": "and spain"},  # 2 words: 3
            {"from": "gpt", "value": "madrid it is"},  # 3 words: 4
        ],
    },
    {"id": "b", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello there"}]},
    {"id": "c", "conversations": [{"from": "gpt", "value": "an answer to nothing"}]},
]


def test_sharegpt_multi_turn_file_is_sessions(tmp_path):
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(SHAREGPT))
    s = read_sessions(path)
    assert s is not None and s.format == "sharegpt" and s.multi_turn
    assert s.turns.tolist() == [2, 1]  # "c" has no user message answered
    assert s.system_tokens.tolist() == [7, 0]
    assert s.user_tokens.tolist() == [8, 3, 2]
    assert s.output_tokens.tolist() == [2, 4, 3]
    # turn 2 of "a" resends the system prompt, the first question and its answer
    assert s.prompt_tokens.tolist() == [7 + 8, 7 + 8 + 2 + 3, 2]
    assert s.repeated_tokens.tolist() == [0, 17, 0]
    assert len(s.think_s) == 0  # ShareGPT has no times
    assert APPROXIMATE_NOTE in s.notes and any("1 of the file's entries" in n for n in s.notes)


def test_sharegpt_jsonl_with_roles_and_content(tmp_path):
    lines = [
        {"messages": [{"role": "user", "content": "one two"}, {"role": "assistant", "content": "three"}] * 3},
    ]
    path = tmp_path / "chats.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    s = read_sessions(path)
    assert s.format == "sharegpt" and s.turns.tolist() == [3]
    assert s.repeated_tokens.tolist() == [0, 5, 10]


def test_a_counter_can_be_given():
    s = sharegpt_sessions(SHAREGPT, "mem", count=len)
    assert s.user_tokens.tolist() == [len("what is the capital of france"), len("and spain"), len("hi")]


@pytest.mark.parametrize(
    "rows, needles",
    [
        ([row(0, None, 1, 10, 5)], ["row 1", "turn without session_id"]),
        ([row(0, "a", 2, 10, 5), row(1, "a", 1, 20, 5)], ["row 2", "turn 1 of session 'a'", "after its turn 2"]),
        ([row(0, "a", 1, 10, 5), row(1, "a", 1, 20, 5)], ["row 2", "session 'a'", "repeats its turn 1"]),
        ([row(0, "a", 1.5, 10, 5)], ["row 1", "turn must be a whole number", "1.5"]),
        ([row(0, "a", "2", 10, 5)], ["row 1", "turn must be a whole number", "'2'"]),
        ([row(0, "a", 0, 10, 5)], ["row 1", "turn must be a whole number >= 1"]),
        ([row(0, ["a"], 1, 10, 5)], ["row 1", "session_id must be a string or an integer"]),
        ([row(0, "a", 1, 10, 5), row(1, "b", None, 10, 5), row(2, "c", 1, 10, 5), row(3, None, 4, 1, 1)], ["row 4"]),
    ],
)
def test_bad_session_columns_are_one_line_naming_file_row_and_field(tmp_path, rows, needles):
    path = jsonl(tmp_path, rows)
    with pytest.raises(TraceError) as e:
        read_sessions(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(path))
    for needle in needles:
        assert needle in msg


def test_the_base_columns_are_checked_as_a_replay_checks_them(tmp_path):
    rows = [row(5, "a", 1, 10, 5), row(1, "a", 2, 20, 5)]
    with pytest.raises(TraceError, match="timestamps out of order"):
        read_sessions(jsonl(tmp_path, rows))


def test_rows_with_a_zero_length_are_dropped_and_counted(tmp_path):
    rows = [row(0, "a", 1, 10, 5), row(1, "a", 2, 20, 0), row(2, "a", 3, 30, 5)]
    s = read_sessions(jsonl(tmp_path, rows))
    assert s.turns.tolist() == [2] and s.notes == ("1 rows with a zero prompt or output length dropped",)
    np.testing.assert_array_equal(s.think_s, [2.0])
