"""A scenario's fixed deployment facts (context length, dtype, load format) hold for its
baselines too; a baseline that sets one itself keeps it, and the study says which differ."""

from __future__ import annotations

import textwrap

from search import prepare, scenario
from tests.support.fakes import ctx as fake_ctx

SCENARIO = """
name: mine
title: my scenario
workload:
  endpoint: completions
  num_requests: 10
  arrival: {mode: poisson, rate: 2}
  prompt_tokens: 100
  output_tokens: 10
objectives:
  - {metric: ttft_p95_ms, direction: minimize}
search_space:
  max_num_seqs: {low: 4, high: 64, log: true}
server:
  fixed: {max_model_len: 2048, max_num_batched_tokens: 512}
baselines:
  vllm_defaults: {}
  own_context: {max_model_len: 1024, max_num_seqs: 8}
"""


def prepared(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(SCENARIO))
    return prepare.prepare(prepare.StudyOptions(scenario=str(path), runs_dir=tmp_path / "runs"), fake_ctx())


def test_baselines_run_on_the_fixed_context_length_but_not_the_fixed_scheduling(tmp_path):
    prep = prepared(tmp_path)
    assert prep.baselines["vllm_defaults"]["max_model_len"] == 2048
    assert "max_num_batched_tokens" not in prep.baselines["vllm_defaults"]  # vLLM's default, not the fixed one


def test_a_baseline_that_sets_its_own_context_keeps_it_and_the_study_says_so(tmp_path):
    prep = prepared(tmp_path)
    assert prep.baselines["own_context"]["max_model_len"] == 1024
    notes = [n for n in prep.baseline_notes if "own_context" in n and "max_model_len" in n]
    assert notes and "1024" in notes[0] and "2048" in notes[0]
    assert not [n for n in prep.baseline_notes if "vllm_defaults" in n and "max_model_len" in n]


def test_deployment_differences_name_the_facts_set_differently():
    diff = scenario.deployment_differences({"max_model_len": 4096, "max_num_seqs": 8}, {"max_model_len": 8192})
    assert diff == {"max_model_len": (4096, 8192)}
    assert scenario.deployment_differences({"dtype": "float32"}, {}) == {"dtype": ("float32", None)}
    assert scenario.deployment_differences({"max_num_seqs": 8}, {"max_num_seqs": 16}) == {}


def test_the_verdict_says_where_a_baseline_is_not_like_for_like(tmp_path):
    from app.outputs.verdict_text import deployment_note

    sc = prepared(tmp_path).scenario
    assert deployment_note(sc, "own_context") == (
        "not like for like: own_context runs max_model_len 1024, every trial 2048 (server.fixed)"
    )
    assert deployment_note(sc, "vllm_defaults") is None
