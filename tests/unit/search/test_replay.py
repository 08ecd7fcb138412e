"""The replay executor under the real study loop, and the landscape recorder on it (no vLLM)."""

from benchmarks import bench_landscape as landscape_bench
from benchmarks.replayed_study import CPU_LANDSCAPE, SYNTHETIC_LANDSCAPE, run_study, world
from objectives.capacity import SLO_CAPACITY_RPS
from search.calibration import CalibrationResult
from search.executor import plan_trial
from search.replay import Landscape, Surrogate, cross_validated, replay_calibration, replay_context, replay_factory
from tests.support.paths import REPO

MIXED = REPO / "configs" / "mixed.yaml"
H200_LANDSCAPE = CPU_LANDSCAPE.with_name("landscape-mixed-8b-h200.json")


def test_replay_is_deterministic_per_seed_and_each_run_draws_fresh_noise():
    path = str(SYNTHETIC_LANDSCAPE)
    a, again, other = run_study(path, "random", 3, 5), run_study(path, "random", 3, 5), run_study(path, "tpe", 4, 5)
    assert a["curve"] == again["curve"] and a["deployed"] == again["deployed"]
    w = world(path)
    config = w.landscape.configs[0].config
    ex = replay_factory(w.surrogate, 3)(replay_context(w.landscape), None)
    p = plan_trial(7, None, {}, config, replay_context(w.landscape), 4096, "test")
    first, same = ex.run(p).metrics, ex.run(p).metrics
    p.run_name = "confirm-r2-trial-0007"
    confirm = ex.run(p).metrics
    other_seed = (
        replay_factory(w.surrogate, 4)(replay_context(w.landscape), None)
        .run(plan_trial(7, None, {}, config, replay_context(w.landscape), 4096, "test"))
        .metrics
    )
    key = "ttft_p95_ms@short"
    assert first[key] == same[key]
    assert confirm[key] != first[key] and other_seed[key] != first[key]
    assert other["sampler"] == "tpe"


def test_surrogate_reports_held_out_accuracy_per_objective():
    landscape = Landscape.load(SYNTHETIC_LANDSCAPE)
    accuracy, classifier = cross_validated(landscape)
    names = {a.metric for a in accuracy}
    assert {"ttft_p95_ms@short", SLO_CAPACITY_RPS, "tpot_p95_ms"} <= names
    assert all(-1 <= a.spearman <= 1 and a.median_rel_error >= 0 for a in accuracy)
    assert classifier is not None and 0.5 < classifier <= 1
    surrogate = Surrogate.fit(landscape)
    low = {**landscape.configs[0].config, "memory_utilization": 0.05}
    assert not surrogate.serves(low)  # the synthetic landscape's configs below 12% never served


def test_landscape_records_the_design_and_repeats_resumably_and_exports_them(tmp_path):
    landscape = Landscape.load(SYNTHETIC_LANDSCAPE)
    surrogate = Surrogate.fit(landscape)
    storage = f"sqlite:///{tmp_path / 'landscape.db'}"
    kw = dict(
        n=4,
        repeats=2,
        runs=3,
        seed=1,
        storage=storage,
        runs_dir=tmp_path,
        ctx=replay_context(landscape),
        executor=replay_factory(surrogate, 0),
        calibrate=replay_calibration(landscape),
    )
    study = landscape_bench.record(str(MIXED), **kw)
    landscape_bench.record(str(MIXED), **kw)  # resumed: nothing left to measure, nothing measured twice
    out = landscape_bench.export(storage, study, commands=["test"])
    assert len(out.configs) == 4 + 2  # the design and both baselines
    assert sorted(len(c.measurements) for c in out.configs) == [1, 1, 1, 1, 3, 3]
    assert {c.baseline for c in out.configs} == {None, "vllm_defaults", "seed_recommended"}
    m = next(m for c in out.configs for m in c.measurements if m.served)
    assert m.capacity_low and m.capacity_high and m.trial_s and set(m.metrics) >= {"ttft_p95_ms@short"}
    assert out.provenance["server_starts"] == 6 + 2 * 2 + 1 and out.provenance["commands"] == ["test"]
    # as the calibration it replays (one recorded before the warm-up reads as made without one)
    assert out.calibration == CalibrationResult.from_dict(landscape.calibration).as_dict()
    saved = tmp_path / "l.json"
    out.save(saved)
    assert Landscape.load(saved).configs[0].measurements == out.configs[0].measurements


def test_a_gpu_landscape_replays_on_its_gpu_with_the_scenario_it_recorded():
    """The H200 landscape's scenario is no built-in one (eager, the KV cache pinned in bytes, a
    shorter screening): the bench replays the file the study ran, on the recorded GPU, where its
    GPU-only flags resolve."""
    landscape = Landscape.load(H200_LANDSCAPE)
    assert [g.name for g in replay_context(landscape).hardware.gpus] == ["NVIDIA H200"]
    w = world(str(H200_LANDSCAPE))
    assert w.scenario.name == "mixed-8b-landscape" and w.scenario.server.fixed["kv_cache_memory_bytes"] == 6 * 2**30
    run = run_study(str(H200_LANDSCAPE), "random", 0, 5)  # a whole study: 5 trials, the confirmation, a deploy
    assert len(run["curve"]) == 5 and run["deployed"] is not None


def test_a_warm_start_bench_row_can_take_its_earlier_study_from_another_landscape(monkeypatch):
    """--warm-from: the '+warm' row's earlier study replays another landscape (another load of the
    same space; here the synthetic one, on the same replayed machine), the warm-started one the
    bench's own."""
    from benchmarks import replayed_study

    seen, real = [], replayed_study._study

    def study(w, d, trials, sampler, seed, budget, name, warm_start=None):
        seen.append((name, w.landscape.synthetic, warm_start, id(trials)))
        return real(w, d, trials, sampler, seed, budget, name, warm_start)

    monkeypatch.setattr(replayed_study, "_study", study)
    run = run_study(str(CPU_LANDSCAPE), "random+warm", 0, 5, warm_from=str(SYNTHETIC_LANDSCAPE))
    # both in one Optuna storage in memory: the warm start reads the earlier study's trials there
    assert [s[:3] for s in seen] == [("earlier", True, None), ("bench", False, "earlier")] and seen[0][3] == seen[1][3]
    assert run["deployed"] is not None


def test_an_interrupted_landscape_record_ends_in_one_line_not_a_traceback(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # what SIGTERM becomes in the study loop (a time limit's)

    monkeypatch.setattr(landscape_bench, "record", interrupted)
    assert landscape_bench.main(["record", "--n", "4"]) == 130
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("interrupted after ") and "continues where" in out[0]
