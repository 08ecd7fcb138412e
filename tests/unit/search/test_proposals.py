"""The diagnosis as a proposer: the rule table, the move on a scripted trial, the mix with TPE,
and the whole study loop on a scripted executor whose trials queue. No vLLM."""

import html
import itertools

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import create_trial
from optuna_dashboard import get_note

from app.outputs import DashboardPublisher, write_report
from loadgen import CLIENT_BEHIND
from objectives.diagnosis import Diagnosis
from search import space as space_mod
from search.executor import TrialOutcome
from search.proposals import MOVE_ATTR, PROPOSAL_ATTR, move_for, moved, proposal_reason
from search.samplers import make_sampler
from storage.tables import TrialStatus
from tests.support.scripted_executor import ScriptedExecutor
from tests.support.study_loop import Recorder, optuna_trials, runner

DISTS = {
    "max_num_seqs": IntDistribution(4, 128, log=True),
    "max_num_batched_tokens": IntDistribution(256, 4096, log=True),
    "memory_utilization": FloatDistribution(0.05, 0.95),
    "long_prefill_token_threshold": CategoricalDistribution([0, 256, 512, 1024]),
}
AT = {"max_num_seqs": 8, "max_num_batched_tokens": 512, "memory_utilization": 0.45, "long_prefill_token_threshold": 0}


def diagnosed(bottleneck: str) -> Diagnosis:
    return Diagnosis(bottleneck, "scripted")


def study_after(bottleneck: str, metrics: dict, config: dict = AT, unset: dict | None = None) -> optuna.Study:
    """A study with one completed trial whose stored diagnosis names `bottleneck`, on the diagnosis-led sampler."""
    study = optuna.create_study(
        directions=["maximize", "minimize"], sampler=make_sampler("diagnosis-tpe", 0, DISTS, 10)
    )
    move = move_for(diagnosed(bottleneck), config, metrics, list(DISTS), unset)
    study.add_trial(
        create_trial(
            params=config,
            distributions={k: DISTS[k] for k in config},
            values=[1.0, 1.0],
            user_attrs={MOVE_ATTR: move.as_dict()} if move else {},
        )
    )
    return study


def proposed(study: optuna.Study) -> tuple[dict, str | None]:
    trial = study.ask()
    return space_mod.suggest(trial, DISTS), proposal_reason(study.sampler, trial.number)


@pytest.mark.parametrize(
    "bottleneck, metrics, knob, value, said",
    [
        ("queueing", {"server_running_peak": 8}, "max_num_seqs", 16, "queue growing, batch full"),
        (
            "queueing",
            {"server_running_peak": 5, "server_kv_cache_usage_peak": 0.97},
            "memory_utilization",
            0.675,
            "KV cache 97% full",
        ),
        ("queueing", {"server_running_peak": 5}, "max_num_batched_tokens", 1024, "the engine is saturated"),
        ("preemption", {"server_preemptions": 12}, "memory_utilization", 0.675, "12 preemptions: KV cache too small"),
        ("prefill_bound", {}, "long_prefill_token_threshold", 512, "long prefills stall first tokens"),
        ("decode_bound", {}, "max_num_seqs", 4, "slow decode steps"),
        (
            "decode_bound",
            {"itl_median_ms": 10, "itl_p99_ms": 80},
            "max_num_batched_tokens",
            256,
            "stall behind prefill",
        ),
    ],
)
def test_the_proposer_makes_the_move_its_rule_names_on_a_scripted_trial(bottleneck, metrics, knob, value, said):
    params, reason = proposed(study_after(bottleneck, metrics))
    assert params == {**AT, knob: pytest.approx(value)}
    assert reason.startswith(f"trial 0 {bottleneck.replace('_', ' ')} (") and said in reason
    assert reason.endswith(f"{knob} {AT[knob]} -> {params[knob]}")


def test_a_knob_at_its_bound_gives_the_rules_next_step():
    at_top = {**AT, "memory_utilization": 0.95}
    params, reason = proposed(study_after("preemption", {"server_preemptions": 12}, at_top))
    assert params == {**at_top, "max_num_seqs": 4} and "lower max_num_seqs 8 -> 4" in reason


VLLM_UNSET = {
    "max_num_seqs": 128,
    "max_num_batched_tokens": 2048,
    "memory_utilization": 0.92,
    "long_prefill_token_threshold": 0,
}  # what the CPU build runs an unset knob with


def test_a_baselines_move_starts_from_what_vllm_runs_the_knobs_it_leaves_unset_with():
    baseline = {"max_num_seqs": 8}  # the threshold unset: vLLM's default, off
    params, reason = proposed(study_after("prefill_bound", {}, baseline, VLLM_UNSET))
    assert params == {**VLLM_UNSET, **baseline, "long_prefill_token_threshold": 512}
    assert reason.endswith("enable long_prefill_token_threshold 0 -> 512")


@pytest.mark.parametrize("bottleneck", ["healthy", "client_bound", "server_errors", "startup_failure"])
def test_no_rule_no_move_the_model_based_sampler_proposes(bottleneck):
    assert move_for(diagnosed(bottleneck), AT, {}, list(DISTS)) is None
    _, reason = proposed(study_after(bottleneck, {}))
    assert reason is None


def test_moves_stay_in_the_space_and_never_turn_a_threshold_off():
    lpt = DISTS["long_prefill_token_threshold"]
    assert [moved(v, lpt, "lower") for v in (1024, 512, 256)] == [512, 256, None]
    assert moved(0, lpt, "enable") == 512 and moved(512, lpt, "enable") is None
    assert moved(128, DISTS["max_num_seqs"], "raise") is None and moved(100, DISTS["max_num_seqs"], "raise") == 128
    assert moved(0.9, DISTS["memory_utilization"], "raise") == 0.95


def test_proposals_alternate_with_the_model_based_sampler_and_leave_enqueued_trials_alone():
    study = study_after("queueing", {"server_running_peak": 8})
    first, why = proposed(study)
    assert why and first["max_num_seqs"] == 16
    study.tell(study.trials[-1].number, [1.0, 1.0])  # no diagnosis stored for it: the trial before still moves
    _, why = proposed(study)
    assert why is None  # after a proposal, TPE's turn
    study.tell(study.trials[-1].number, [1.0, 1.0])
    study.enqueue_trial({"max_num_seqs": 64})
    enqueued, why = proposed(study)
    assert why is None and enqueued["max_num_seqs"] == 64


def queueing(plan):
    """A server whose queue grows while its batch is full, whatever max_num_seqs is."""
    seqs = plan.config.get("max_num_seqs", 16)
    metrics = {
        "output_throughput": 10.0 * seqs,
        "request_throughput": 0.5 * seqs,
        "ttft_p95_ms": 400.0,
        "ttft_median_ms": 200.0,
        "error_rate": 0.0,
        "completed": 8.0,
        "failed": 0.0,
        CLIENT_BEHIND: 0.0,
        "server_queue_time_mean_ms": 300.0,
        "server_ttft_mean_ms": 350.0,
        "server_waiting_peak": 6.0,
        "server_waiting_mean": 3.0,
        "server_running_peak": float(seqs),
    }
    return TrialOutcome(status=TrialStatus.OK, metrics=metrics, command=f"scripted {plan.server_args.flags}")


def test_in_the_study_loop_the_baselines_diagnosis_moves_from_vllms_defaults(tmp_path):
    # loop.yaml's baseline sets nothing: its server queues with 16 of the default 128 sequences
    # running, so the move raises max_num_batched_tokens from the CPU build's default, 2048
    events = Recorder()
    runner(tmp_path, ScriptedExecutor(script=queueing), trials=2, sampler="diagnosis-tpe", observers=[events]).run()
    started = [e for n, e in events.events if n == "trial_started"]
    assert "baseline" in started[0].label
    assert started[1].label.endswith(
        "(proposed: trial 0 queueing (queue growing, batch not full: the engine is "
        "saturated): raise max_num_batched_tokens 2048 -> 4096)"
    )


def test_the_study_loop_stores_each_move_and_each_proposal_with_its_reason_and_shows_it(tmp_path):
    events = Recorder()
    r = runner(
        tmp_path,
        ScriptedExecutor(script=queueing),
        trials=6,
        sampler="diagnosis-tpe",
        observers=[events, DashboardPublisher()],
    )
    r.run()
    told = {t.number: t for t in optuna_trials(r)}
    assert all(MOVE_ATTR in t.user_attrs for t in told.values())  # every trial queued at a full batch
    proposals = [t for t in told.values() if PROPOSAL_ATTR in t.user_attrs]
    assert len(proposals) >= 2
    for t in proposals:
        source = told[int(t.user_attrs[PROPOSAL_ATTR].split()[1])]
        if "baseline" in source.user_attrs:  # its batch is not full (test above)
            continue
        old = source.params["max_num_seqs"]
        assert t.params["max_num_seqs"] == min(2 * old, 64)
        assert t.user_attrs[PROPOSAL_ATTR].endswith(f"raise max_num_seqs {old} -> {t.params['max_num_seqs']}")
    labels = [e.label for n, e in events.events if n == "trial_started"]
    assert sum("(proposed: trial " in label for label in labels) == len(proposals)
    # the report and the dashboard's trial note say why each proposed trial was proposed
    report = write_report(r.prep.storage_url, "loop", tmp_path / "report.html").read_text()
    study = optuna.load_study(study_name="loop", storage=r.prep.storage_url)
    for t in proposals:
        assert html.escape(f"proposed: {t.user_attrs[PROPOSAL_ATTR]}") in report
        assert f"**Where its configuration came from**: proposed: {t.user_attrs[PROPOSAL_ATTR]}" in get_note(
            optuna.trial.Trial(study, t._trial_id)
        )
    sampled = [t for t in told.values() if "baseline" not in t.user_attrs]
    assert not any(
        PROPOSAL_ATTR in a.user_attrs and PROPOSAL_ATTR in b.user_attrs for a, b in itertools.pairwise(sampled)
    )  # never two proposals in a row
