"""vLLM's performance modes as baselines of the shipped scenarios: `throughput` where the aim is
throughput, checked before any server starts, and dropped in one line where the installed vLLM
lacks the flag."""

from __future__ import annotations

import pytest

from search import prepare, scenario
from tests.support.fakes import ctx as fake_ctx

THROUGHPUT_AIMED = ["api_service", "batch_processing"]


@pytest.mark.parametrize("name", THROUGHPUT_AIMED)
def test_the_throughput_scenarios_compare_the_pick_with_vllms_throughput_mode(name):
    sc, _, _ = scenario.load(name)
    assert sc.baselines["performance_throughput"] == {"performance_mode": "throughput"}


def test_online_chat_has_no_performance_mode_baseline():
    # Its aim would be interactivity, which acts on CUDA graphs only, and a scenario cannot hold
    # a baseline to GPUs (docs/serving.md, "Performance modes").
    sc, _, _ = scenario.load("online_chat")
    assert not any("performance_mode" in values for values in sc.baselines.values())


@pytest.mark.parametrize("name", THROUGHPUT_AIMED)
def test_the_baseline_runs_with_the_flag_where_the_installed_vllm_has_it(tmp_path, name):
    prep = prepare.prepare(
        prepare.StudyOptions(scenario=name, runs_dir=tmp_path), fake_ctx("0.32.0", extra=["--performance-mode"])
    )
    assert prep.baselines["performance_throughput"]["performance_mode"] == "throughput"
    assert not [n for n in prep.baseline_notes if "performance_throughput" in n]


@pytest.mark.parametrize("name", THROUGHPUT_AIMED)
def test_on_a_vllm_without_the_flag_the_baseline_is_reported_dropped_in_one_line(tmp_path, name):
    prep = prepare.prepare(prepare.StudyOptions(scenario=name, runs_dir=tmp_path), fake_ctx("0.16.0"))
    assert [n for n in prep.baseline_notes if "performance_throughput" in n] == [
        "baseline performance_throughput: performance_mode dropped: --performance-mode was added in vLLM "
        "0.17.0; the installed vllm 0.16.0 does not accept it; not passed"
    ]
