"""Only flags on the allow list reach a server: a scenario naming any other is refused by the real
CLI with exit code 2 before any server starts, from a file and from a study's stored scenario
(a worker joining it, a resume), even where the installed vLLM accepts the flag."""

import sqlite3

import pytest
import yaml

import search.prepare
import search.study.loop
from app.cli import main
from tests.support.fakes import ctx
from tests.support.scripted_executor import ScriptedExecutor
from tests.support.study_loop import LOOP_SCENARIO, runner

# Each of these made a server import and run code, read TLS files, or refuse the tuner's own client.
REFUSED = {
    "tool_parser_plugin": "/tmp/p.py",
    "middleware": "p.Middleware",
    "worker_extension_cls": "p.Extension",
    "logits_processors": "p.Processor",
    "ssl_keyfile": "/tmp/key.pem",
    "api_key": "secret",
    # vLLM's variable that names the plugins it loads, the tuner's own among them: an environment
    # variable, never a flag, and no scenario sets either
    "VLLM_PLUGINS": "autotune_vllm_plugin",
}
NOT_ALLOWED = (
    "is neither a tunable parameter nor a flag on the allow list of flags that shape serving "
    "performance; `autotune params` lists what a scenario may set"
)
NO_KEY = "cannot be set from a scenario (the tuner's load client sends no key: every request would fail with HTTP 401)"
FIELDS = ("search_space", "server.fixed", "baselines")


def with_flag(field: str, name: str) -> str:
    """The loop scenario with `name` set in `field` (a one-value range in search_space)."""
    data = yaml.safe_load(LOOP_SCENARIO.read_text())
    value = REFUSED[name]
    if field == "search_space":
        data["search_space"][name] = {"choices": [value]}
    elif field == "server.fixed":
        data["server"]["fixed"][name] = value
    else:
        data["baselines"]["vllm_defaults"][name] = value
    return yaml.safe_dump(data, sort_keys=False)


def refusal(field: str, name: str) -> str:
    """The line under "FILE: invalid scenario" that names the field, the flag and why."""
    if field == "search_space":
        return f"  search_space: unknown parameter(s) {name}; tunable parameters: "
    why = NO_KEY if name == "api_key" else NOT_ALLOWED
    return (
        f"  server.fixed: {name!r} {why}" if field == "server.fixed" else f"  baselines: vllm_defaults: {name!r} {why}"
    )


@pytest.fixture
def executor(monkeypatch) -> ScriptedExecutor:
    """Every server the CLI would start goes to this executor (its plans), on a vLLM that accepts
    each refused flag, as the real one does."""
    scripted = ScriptedExecutor()
    flags = ["--" + name.replace("_", "-") for name in REFUSED]
    monkeypatch.setattr(search.prepare, "launch_context", lambda model=None: ctx(extra=flags))
    monkeypatch.setattr(search.study.loop, "vllm_executor", lambda prep: scripted.factory)
    return scripted


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("name", REFUSED)
def test_a_scenario_file_naming_a_flag_off_the_allow_list_is_refused_before_any_server(
    tmp_path, capsys, executor, field, name
):
    path = tmp_path / "tampered.yaml"
    path.write_text(with_flag(field, name))
    storage = f"sqlite:///{tmp_path / 'x.db'}"
    assert main(["search", str(path), "--trials", "2", "--storage", storage, "--runs-dir", str(tmp_path)]) == 2
    header, line = capsys.readouterr().err.strip().splitlines()
    assert header == f"autotune: error: {path}: invalid scenario"
    assert line.startswith(refusal(field, name))
    assert executor.plans == [] and not (tmp_path / "loop").exists() and not (tmp_path / "x.db").exists()


def tamper(db, source: str, digest: str | None = None) -> None:
    """Edit the scenario a study stored, as whoever can write its database could."""
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE autotune_studies SET scenario_source = ? WHERE study_name = 'loop'", (source,))
        if digest is not None:
            conn.execute("UPDATE autotune_studies SET scenario_digest = ? WHERE study_name = 'loop'", (digest,))
    conn.close()


@pytest.fixture
def study(tmp_path):
    """Study 'loop' begun (budget 5) with no trial run yet: a worker or a resume has work to do."""
    runner(tmp_path, ScriptedExecutor(), trials=5).open()
    return tmp_path / "loop.db"


@pytest.mark.parametrize("field", FIELDS)
def test_a_worker_refuses_a_stored_scenario_edited_to_name_a_flag_off_the_allow_list(
    tmp_path, capsys, executor, study, field
):
    from search.scenario import digest

    source = with_flag(field, "tool_parser_plugin")
    tamper(study, source, digest(source))  # digest and all: the worker takes the stored scenario as its own
    host = tmp_path / "worker-host"
    assert main(["worker", "--storage", f"sqlite:///{study}", "--study", "loop", "--runs-dir", str(host)]) == 2
    header, line = capsys.readouterr().err.strip().splitlines()
    assert header == f"autotune: error: {host / 'loop' / 'scenario.yaml'}: invalid scenario"
    assert line.startswith(refusal(field, "tool_parser_plugin"))
    assert executor.plans == []


@pytest.mark.parametrize("field", FIELDS)
def test_a_resume_refuses_a_study_whose_stored_scenario_was_edited_to_name_a_flag_off_the_allow_list(
    tmp_path, capsys, executor, study, field
):
    # The digest is left as it was, so the file given still matches it: only the stored text is checked.
    tamper(study, with_flag(field, "tool_parser_plugin"))
    storage = f"sqlite:///{study}"
    assert (
        main(
            [
                "search",
                str(LOOP_SCENARIO),
                "--trials",
                "5",
                "--storage",
                storage,
                "--runs-dir",
                str(tmp_path),
                "--confirm-runs",
                "0",
            ]
        )
        == 2
    )
    header, line = capsys.readouterr().err.strip().splitlines()
    assert header == f"autotune: error: the scenario stored with study 'loop' in {storage}: invalid scenario"
    assert line.startswith(refusal(field, "tool_parser_plugin"))
    assert executor.plans == []
