"""Trace readers: each format from a sample in its exact columns, and bad files in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadgen.trace.formats import TraceError, detect_format, read_trace

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.0000000,879,20
"""

BURSTGPT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45,ChatGPT,1087,0,1087,Conversation log
118,GPT-4,417,276,693,API log
"""

MOONCAKE = [
    {
        "timestamp": 27482,
        "input_length": 6955,
        "output_length": 52,
        "hash_ids": [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59],
    },
    {
        "timestamp": 30535,
        "input_length": 6472,
        "output_length": 26,
        "hash_ids": [46, 47, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70],
    },
]

OWN = [
    {
        "timestamp": 0.0,
        "prompt_tokens": 300,
        "output_tokens": 20,
        "class": "chat",
        "prefix_id": "sys-a",
        "prefix_tokens": 128,
    },
    {"timestamp": 0.5, "prompt_tokens": 900, "output_tokens": 200, "class": "docs"},
    {
        "timestamp": 2.0,
        "prompt_tokens": 250,
        "output_tokens": 30,
        "class": "chat",
        "prefix_id": "sys-a",
        "prefix_tokens": 128,
    },
]


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def jsonl(rows):
    return "\n".join(json.dumps(r) for r in rows) + "\n"


def test_azure_reads_its_datetime_timestamps_to_seconds(tmp_path):
    t = read_trace(write(tmp_path, "azure.csv", AZURE))
    assert t.format == "azure"
    np.testing.assert_allclose(t.arrival_s, [0.0, 4.314579, 4.319410], atol=1e-6)
    assert t.prompt_tokens.tolist() == [374, 396, 879]
    assert t.output_tokens.tolist() == [44, 109, 20]
    assert t.segments is None and t.class_names == ("default",)


def test_burstgpt_drops_failed_requests_and_says_how_many(tmp_path):
    t = read_trace(write(tmp_path, "burst.csv", BURSTGPT))
    assert t.format == "burstgpt"
    assert t.arrival_s.tolist() == [0.0, 113.0]
    assert t.prompt_tokens.tolist() == [472, 417]
    assert t.output_tokens.tolist() == [18, 276]
    assert t.notes == ("1 rows with a zero prompt or output length dropped",)


def test_mooncake_reads_milliseconds_and_block_hashes(tmp_path):
    t = read_trace(write(tmp_path, "mooncake.jsonl", jsonl(MOONCAKE)))
    assert t.format == "mooncake"
    np.testing.assert_allclose(t.arrival_s, [0.0, 3.053])
    assert t.prompt_tokens.tolist() == [6955, 6472]
    a, b = t.segments
    assert len(a) == 14 and all(tokens == 512 for _, tokens in a)
    assert a[:2] == b[:2] and a[2] != b[2]  # the two share their first two blocks


def test_own_jsonl_reads_classes_and_prefix_ids(tmp_path):
    t = read_trace(write(tmp_path, "own.jsonl", jsonl(OWN)))
    assert t.format == "jsonl"
    assert t.class_names == ("chat", "docs")
    assert t.class_index.tolist() == [0, 1, 0]
    assert t.segments[0] == t.segments[2] and len(t.segments[0]) == 1 and t.segments[0][0][1] == 128
    assert t.segments[1] == ()


def test_own_jsonl_takes_iso_timestamps(tmp_path):
    rows = [{"timestamp": "2026-01-05T09:00:00Z", "prompt_tokens": 5, "output_tokens": 5}]
    rows.append({"timestamp": "2026-01-05T09:00:01.250Z", "prompt_tokens": 5, "output_tokens": 5})
    assert read_trace(write(tmp_path, "iso.jsonl", jsonl(rows))).arrival_s.tolist() == [0.0, 1.25]


def test_hash_ids_in_own_jsonl_use_the_block_size_given(tmp_path):
    rows = [{"timestamp": 0, "prompt_tokens": 100, "output_tokens": 5, "hash_ids": [1, 2]}]
    t = read_trace(write(tmp_path, "blocks.jsonl", jsonl(rows)), block_tokens=16)
    assert [tokens for _, tokens in t.segments[0]] == [16, 16]


@pytest.mark.parametrize(
    "name, text, expected",
    [
        ("azure.csv", AZURE, "azure"),
        ("burst.csv", BURSTGPT, "burstgpt"),
        ("m.jsonl", jsonl(MOONCAKE), "mooncake"),
        ("own.jsonl", jsonl(OWN), "jsonl"),
    ],
)
def test_format_is_told_by_the_columns(tmp_path, name, text, expected):
    assert detect_format(write(tmp_path, name, text)) == expected


def one_line(tmp_path, name, text, **kw) -> str:
    with pytest.raises(TraceError) as e:
        read_trace(write(tmp_path, name, text), **kw)
    message = str(e.value)
    assert "\n" not in message and message.startswith(str(tmp_path / name))
    return message


def test_unknown_columns_name_what_was_found_and_what_is_expected(tmp_path):
    msg = one_line(tmp_path, "x.csv", "time,input,output\n1,2,3\n")
    assert "columns found: time, input, output" in msg
    assert "azure (TIMESTAMP, ContextTokens, GeneratedTokens)" in msg
    assert "mooncake (timestamp, input_length, output_length" in msg
    assert "burstgpt (Timestamp, Request tokens, Response tokens" in msg


def test_negative_timestamp_is_refused(tmp_path):
    rows = [{"timestamp": -1, "prompt_tokens": 5, "output_tokens": 5}]
    assert "row 1: timestamp is negative" in one_line(tmp_path, "neg.jsonl", jsonl(rows))


def test_unordered_timestamps_are_refused(tmp_path):
    text = "Timestamp,Request tokens,Response tokens\n5,10,10\n3,10,10\n"
    msg = one_line(tmp_path, "unordered.csv", text)
    assert "row 3: timestamps out of order" in msg and "sort the file" in msg


def test_a_file_without_requests_is_an_empty_window(tmp_path):
    assert "an empty window" in one_line(tmp_path, "empty.csv", "")
    text = "Timestamp,Request tokens,Response tokens\n5,10,0\n"
    assert "an empty window" in one_line(tmp_path, "failed.csv", text)


def test_a_length_that_is_not_a_count_names_row_and_column(tmp_path):
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,12.5,3\n"
    assert "row 2: ContextTokens must be a whole number" in one_line(tmp_path, "frac.csv", text)


def test_a_row_missing_a_column_names_it(tmp_path):
    rows = [OWN[0], {"timestamp": 1.0, "prompt_tokens": 5}]
    msg = one_line(tmp_path, "missing.jsonl", jsonl(rows))
    assert "line 2 lacks output_tokens" in msg


def test_window_in_trace_time_and_its_emptiness(tmp_path):
    t = read_trace(write(tmp_path, "own.jsonl", jsonl(OWN)))
    part = t.between(0.4, 3.0)
    assert part.arrival_s.tolist() == [0.0, 1.5] and part.prompt_tokens.tolist() == [900, 250]
    with pytest.raises(TraceError, match="an empty window: no request arrived between 5 s and 9 s"):
        t.between(5.0, 9.0)


def test_classes_can_be_taken_one_at_a_time(tmp_path):
    t = read_trace(write(tmp_path, "own.jsonl", jsonl(OWN))).of_classes(["chat"])
    assert t.class_names == ("chat",) and t.prompt_tokens.tolist() == [300, 250]
    assert t.arrival_s.tolist() == [0.0, 2.0]
