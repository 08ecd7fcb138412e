"""`autotune load` finds scenarios as a study does and probes capacity as a study calibrates."""

import argparse

import pytest

from app.cli import load as load_command
from tests.support.cli import autotune_forked

URL = "http://127.0.0.1:9"  # nothing listens: every test here fails or returns before sending


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    load_command.register(parser.add_subparsers())
    return parser.parse_args(["load", *map(str, argv), "--url", URL])


def test_unknown_scenario_is_the_same_one_line_as_for_a_study(tmp_path):
    load = autotune_forked("load", "chatbot", "--url", URL, timeout=60)
    search = autotune_forked("search", "chatbot", "--runs-dir", tmp_path, timeout=60)
    line = (
        "autotune: error: unknown scenario 'chatbot'; built-in scenarios: api_service, "
        "batch_processing, chat_sessions, mixed, online_chat (or pass a path to your own YAML file)"
    )
    assert load.returncode == search.returncode == 2
    assert load.stderr.strip() == search.stderr.strip() == line
    assert load.stdout == ""


@pytest.mark.parametrize("rate", [[], ["--rate", "1"]])  # with the capacity probe first, and without
def test_a_server_that_cannot_be_reached_is_one_line_not_a_traceback(rate):
    load = autotune_forked("load", "mixed", "--url", URL, *rate, timeout=60)
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
    load = autotune_forked("load", "--workload", path, "--url", URL, timeout=60)
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
    load = autotune_forked("load", "mixed", *args, timeout=60)
    assert load.returncode == 2 and load.stderr.strip().splitlines()[-1].endswith(said)
    assert "Traceback" not in load.stderr
