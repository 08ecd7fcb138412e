"""`autotune load` finds scenarios as a study does and probes capacity as a study calibrates,
called in-process with the load generator replaced.
"""

import argparse
import textwrap
from types import SimpleNamespace

import pytest

from app.cli import load as load_command
from search import calibration, scenario
from search.executor import calibration_run as measuring
from search.scenario import CONFIG_DIR, ScenarioError

URL = "http://127.0.0.1:9"  # nothing listens: every test here fails or returns before sending


def parse(*argv: str) -> load_command.LoadCommandOptions:
    parser = argparse.ArgumentParser()
    load_command.register(parser.add_subparsers())
    return load_command.load_options(parser.parse_args(["load", *map(str, argv), "--url", URL]))


def test_a_scenario_name_and_its_path_give_the_same_validated_scenario(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # names resolve against the repository's configs/, not the cwd
    by_name, sc_by_name = load_command.build_workload(parse("mixed"))
    by_path, sc_by_path = load_command.build_workload(parse(CONFIG_DIR / "mixed.yaml"))
    expected, _, _ = scenario.load("mixed")
    assert sc_by_name == sc_by_path == expected
    # one run of a staged scenario is its target stage: the requests every stage holds
    stage = expected.workload.model_copy(
        update={"num_requests": expected.capacity.size(expected.workload, expected.slos).requests}
    )
    assert by_name == by_path == stage and by_name.num_requests == 140


def test_a_scenario_file_is_validated_whole(tmp_path):
    # a valid workload in a scenario the study would reject: the load command rejects it too
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        textwrap.dedent("""
        name: bad
        title: t
        workload: {endpoint: completions, num_requests: 4, prompt_tokens: 10, output_tokens: 4,
                   arrival: {mode: closed, concurrency: 1}}
        objectives: [{metric: ttft_p95_ms, direction: minimize}]
        search_space: {gpu_util: {low: 0.1, high: 0.9}}
    """)
    )
    for args in (parse(bad), parse("--workload", bad)):
        with pytest.raises(ScenarioError, match=f"^{bad}: invalid scenario\n  search_space: unknown parameter"):
            load_command.build_workload(args)


def test_capacity_probe_is_the_calibrations_saturation_run(tmp_path, monkeypatch):
    """The load command's probe and the study's calibration run the same closed loop, with the
    scenario's `calibration:` settings."""
    text = (CONFIG_DIR / "online_chat.yaml").read_text() + "\ncalibration: {saturation_requests: 40}\n"
    path = tmp_path / "chat.yaml"
    path.write_text(text)
    sc, _, _ = scenario.load(path)

    sent = []

    def fake_run(spec):
        sent.append(spec)
        return SimpleNamespace(
            metrics=SimpleNamespace(request_throughput=5.0),
            records=[],
            flat_metrics=lambda: {"request_throughput": 5.0, "ttft_median_ms": 1.0},
        )

    monkeypatch.setattr("loadgen.run_load_sync", lambda url, model, spec, **kw: fake_run(spec))
    args = parse(path)
    spec, found = load_command.build_workload(args)
    assert load_command.probe_capacity(args, spec, found, SimpleNamespace(print=lambda *a: None)) == 5.0
    probe = sent.pop()

    async def fake_load(url, model, spec, **kw):
        return fake_run(spec)

    async def fake_reset(url, watch=None):
        return True

    class FakeServer:
        base_url = URL

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(measuring, "launch", lambda *a, **kw: FakeServer())
    monkeypatch.setattr(measuring, "run_load", fake_load)
    monkeypatch.setattr(measuring, "reset_prefix_cache", fake_reset)  # between rounds: no server to ask
    ctx = SimpleNamespace(model=SimpleNamespace(path=tmp_path))
    measuring.calibrate(sc, ctx, baseline=None, run_dir=tmp_path)
    saturation = sent[-1]

    assert probe == saturation
    assert (probe.arrival.mode, probe.arrival.concurrency, probe.num_requests) == ("closed", 32, 40)
    default = calibration.saturation_workload(spec)  # a plain workload file: the defaults
    assert (default.arrival.concurrency, default.num_requests) == (32, 64)
