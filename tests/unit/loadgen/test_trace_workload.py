"""A workload that replays a trace: validation, its classes, its schedule and its requests."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from pydantic import ValidationError

from benchmarks.trace_synthetic import mooncake_jsonl, synthetic_trace
from loadgen.arrivals import open_loop_offsets
from loadgen.prompts import build_requests
from loadgen.trace import (
    interarrival_cv,
    read_trace,
    shared_tokens_from_ids,
    shared_tokens_from_segments,
    window_rows,
    window_start,
)
from loadgen.workload import WorkloadSpec

OWN = [
    {
        "timestamp": 0.0,
        "prompt_tokens": 90,
        "output_tokens": 4,
        "class": "chat",
        "prefix_id": "sys",
        "prefix_tokens": 48,
    },
    {"timestamp": 0.2, "prompt_tokens": 300, "output_tokens": 9, "class": "docs"},
    {
        "timestamp": 0.3,
        "prompt_tokens": 70,
        "output_tokens": 5,
        "class": "chat",
        "prefix_id": "sys",
        "prefix_tokens": 48,
    },
    {"timestamp": 4.0, "prompt_tokens": 120, "output_tokens": 6, "class": "chat"},
    {"timestamp": 4.1, "prompt_tokens": 5000, "output_tokens": 7, "class": "docs"},
]


@pytest.fixture
def own(tmp_path):
    path = tmp_path / "own.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in OWN) + "\n")
    return path


@pytest.fixture
def mooncake(tmp_path):
    path = tmp_path / "day.jsonl"
    path.write_text(mooncake_jsonl(synthetic_trace(600, seed=2)))
    return path


def workload(trace: dict, **kw) -> WorkloadSpec:
    data = {"trace": trace, "arrival": {"mode": "trace", "rate": 2.0}, "num_requests": 5, **kw}
    return WorkloadSpec.model_validate(data)


def test_the_traces_classes_become_the_workloads(own):
    wl = workload({"file": str(own)})
    assert wl.class_names == ["chat", "docs"]
    chat = wl.classes[0]
    assert chat.weight == pytest.approx(0.6)
    assert chat.prompt_tokens.upper_bound() == 120 and chat.output_tokens.lower_bound() == 4
    assert chat.shared_prefix is not None and wl.classes[1].shared_prefix is None
    assert wl.longest_request_tokens() == 5007


def test_a_dumped_trace_workload_validates_again_without_its_classes(own):
    wl = workload({"file": str(own)})
    data = wl.model_dump(mode="json")
    assert "classes" not in data and data["trace"]["file"] == str(own)
    assert WorkloadSpec.model_validate(data).class_names == ["chat", "docs"]


def test_a_relative_trace_path_is_read_beside_the_yaml(own, tmp_path):
    path = tmp_path / "wl.yaml"
    path.write_text(
        yaml.safe_dump({"trace": {"file": own.name}, "arrival": {"mode": "trace", "rate": 1.0}, "duration_s": 10})
    )
    assert WorkloadSpec.from_yaml(path).trace.file == tmp_path / own.name


def test_clipping_to_the_context_is_counted(own):
    wl = workload({"file": str(own), "max_total_tokens": 1024})
    assert wl.longest_request_tokens() == 1024 and wl.trace.clipped_requests == 1
    assert "1 of 5 requests" in workload({"file": str(own)}).trace.beyond_context(4096)
    assert wl.trace.beyond_context(4096) is None


@pytest.mark.parametrize(
    "extra, needle",
    [
        ({"prompt_tokens": 64}, "a trace gives the requests' lengths and prefixes: remove prompt_tokens"),
        ({"classes": [{"prompt_tokens": 5, "output_tokens": 5}]}, "remove classes"),
    ],
)
def test_a_trace_with_classes_of_its_own_is_refused(own, extra, needle):
    with pytest.raises(ValidationError, match=needle):
        workload({"file": str(own)}, **extra)


def test_trace_arrivals_need_a_trace():
    with pytest.raises(ValidationError, match="arrival mode=trace replays the workload's trace"):
        WorkloadSpec.model_validate(
            {"prompt_tokens": 8, "output_tokens": 2, "arrival": {"mode": "trace", "rate": 1}, "num_requests": 3}
        )


def test_a_bad_trace_file_fails_validation_in_one_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("when,in,out\n1,2,3\n")
    with pytest.raises(ValidationError) as e:
        workload({"file": str(bad)})
    line = next(x for x in str(e.value).splitlines() if "columns found" in x)
    assert "when, in, out" in line


def test_an_empty_window_of_the_trace_is_refused(own):
    with pytest.raises(ValidationError, match="an empty window"):
        workload({"file": str(own), "start_s": 1.0, "end_s": 3.0})


def test_the_schedule_holds_the_stage_rate_and_the_windows_burstiness(mooncake):
    wl = WorkloadSpec.model_validate(
        {"trace": {"file": str(mooncake)}, "arrival": {"mode": "trace", "rate": 3.0}, "duration_s": 40, "seed": 2}
    )
    offsets = open_loop_offsets(wl.arrival, None, wl.duration_s, wl.seed, wl.replayed_trace())
    assert len(offsets) == 120 and offsets[-1] == pytest.approx(40.0)
    trace = read_trace(mooncake)
    rows = window_rows(len(trace), window_start(len(trace), wl.seed), 0, 120)
    assert np.all(np.diff(rows) == 1)  # this seed's window does not wrap around
    assert interarrival_cv(offsets) == pytest.approx(interarrival_cv(trace.arrival_s[rows]))  # the trace's gaps
    slower = open_loop_offsets(wl.arrival.model_copy(update={"rate": 0.5}), 120, None, wl.seed, wl.replayed_trace())
    assert interarrival_cv(slower) == pytest.approx(interarrival_cv(offsets)) and slower[-1] == pytest.approx(240)


def test_requests_have_the_traces_lengths_and_share_its_prefixes(mooncake, tok):
    wl = WorkloadSpec.model_validate(
        {"trace": {"file": str(mooncake)}, "arrival": {"mode": "trace", "rate": 3.0}, "num_requests": 200, "seed": 4}
    )
    requests = build_requests(wl, tok)
    trace = wl.replayed_trace()
    assert len(requests) == 200
    picked = window_rows(len(trace), window_start(len(trace), wl.seed), 0, 200)
    assert [r.prompt_tokens for r in requests] == trace.prompt_tokens[picked].tolist()
    assert [len(r.prompt_ids) for r in requests] == trace.prompt_tokens[picked].tolist()
    assert [r.output_tokens for r in requests] == trace.output_tokens[picked].tolist()
    sent = shared_tokens_from_ids([r.prompt_ids for r in requests], block=16)
    planned = shared_tokens_from_segments([trace.segments[i] for i in picked], trace.prompt_tokens[picked], block=16)
    assert sent.sum() > 0.3 * trace.prompt_tokens[picked].sum()
    assert np.array_equal(sent, planned)  # the tokens sent share exactly what the trace shares


def test_one_class_of_a_trace_replays_only_its_rows(own, tok):
    wl = workload({"file": str(own)})
    chat_only = wl.model_copy(update={"classes": [wl.classes[0].model_copy(update={"weight": 1.0})]})
    requests = build_requests(chat_only, tok, 6)
    assert {r.class_name for r in requests} == {"chat"}
    assert sorted({r.prompt_tokens for r in requests}) == [70, 90, 120]


def test_chat_prompts_from_a_trace_hit_their_lengths(own, tok):
    wl = workload({"file": str(own), "max_total_tokens": 512}, endpoint="chat")
    for r in build_requests(wl, tok, 5):
        assert tok.count_chat([dict(m) for m in r.messages]) == r.prompt_tokens == r.target_prompt_tokens
