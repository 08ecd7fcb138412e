"""`autotune load` finds scenarios as a study does and probes capacity as a study calibrates."""

import argparse
import textwrap
from types import SimpleNamespace

import pytest

from search import calibration, scenario
from search.cli import load as load_command
from search.executor import calibration_run as measuring
from search.scenario import CONFIG_DIR, ScenarioError
from tests.support.cli import autotune

URL = "http://127.0.0.1:9"  # nothing listens: every test here fails or returns before sending


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    load_command.register(parser.add_subparsers())
    return parser.parse_args(["load", *map(str, argv), "--url", URL])


def test_a_scenario_name_and_its_path_give_the_same_validated_scenario(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # names resolve against the repository's configs/, not the cwd
    by_name, sc_by_name = load_command.build_workload(parse("mixed"))
    by_path, sc_by_path = load_command.build_workload(parse(CONFIG_DIR / "mixed.yaml"))
    expected, _, _ = scenario.load("mixed")
    assert sc_by_name == sc_by_path == expected
    assert by_name == by_path == expected.workload


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


def test_unknown_scenario_is_the_same_one_line_as_for_a_study(tmp_path):
    load = autotune("load", "chatbot", "--url", URL, timeout=60)
    search = autotune("search", "chatbot", "--runs-dir", tmp_path, timeout=60)
    line = (
        "autotune: error: unknown scenario 'chatbot'; built-in scenarios: api_service, "
        "batch_processing, mixed, online_chat (or pass a path to your own YAML file)"
    )
    assert load.returncode == search.returncode == 2
    assert load.stderr.strip() == search.stderr.strip() == line
    assert load.stdout == ""


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

    class FakeServer:
        base_url = URL

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(measuring, "launch", lambda *a, **kw: FakeServer())
    monkeypatch.setattr(measuring, "run_load", fake_load)
    ctx = SimpleNamespace(model=SimpleNamespace(path=tmp_path))
    measuring.calibrate(sc, ctx, baseline=None, run_dir=tmp_path)
    saturation = sent[-1]

    assert probe == saturation
    assert (probe.arrival.mode, probe.arrival.concurrency, probe.num_requests) == ("closed", 32, 40)
    default = calibration.saturation_workload(spec)  # a plain workload file: the defaults
    assert (default.arrival.concurrency, default.num_requests) == (32, 64)


@pytest.mark.parametrize("rate", [[], ["--rate", "1"]])  # with the capacity probe first, and without
def test_a_server_that_cannot_be_reached_is_one_line_not_a_traceback(rate):
    load = autotune("load", "mixed", "--url", URL, *rate, timeout=60)
    assert load.returncode == 1
    err = load.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"autotune: error: cannot reach {URL}: GET /v1/models failed (")


@pytest.mark.parametrize(
    "text, said",
    [
        ("workload: [1,\n", "not valid YAML: line 2, column 1: "),
        ("- 1\n- 2\n", "expected a mapping at the top level"),
    ],
)
def test_a_workload_file_that_is_not_a_mapping_is_one_line(tmp_path, text, said):
    path = tmp_path / "w.yaml"
    path.write_text(text)
    load = autotune("load", "--workload", path, "--url", URL, timeout=60)
    assert load.returncode == 2
    lines = load.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"autotune: error: --workload {path}: {said}")


@pytest.mark.parametrize(
    "args, said",
    [
        (
            ["--url", "ftp://127.0.0.1:9"],
            "argument --url: must be http://HOST:PORT (or https://), got 'ftp://127.0.0.1:9'",
        ),
        (["--url", URL, "--rate", "-1"], "argument --rate: must be a number > 0, got '-1'"),
        (["--url", URL, "--concurrency", "0"], "argument --concurrency: must be a whole number >= 1, got '0'"),
        (["--url", URL, "--goodput", "ttft:abc"], "--goodput 'ttft:abc': ttft must be a number > 0, got 'abc'"),
    ],
)
def test_a_load_flag_out_of_range_is_refused_before_anything_is_sent(args, said):
    load = autotune("load", "mixed", *args, timeout=60)
    assert load.returncode == 2 and load.stderr.strip().splitlines()[-1].endswith(said)
    assert "Traceback" not in load.stderr
