"""The limits `make lint` holds the product packages to beyond ruff's own rules
(scripts/check_code_limits.py): a function's and a module's length, module names, and mypy's coverage; and the parameter
limit as pyproject.toml gives it to ruff (ruff itself runs on a violator in
tests/integration/test_lint_limits.py: it is a process of its own)."""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.paths import REPO


def _checker():
    spec = importlib.util.spec_from_file_location("check_code_limits", REPO / "scripts/check_code_limits.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


checker = _checker()


def function_of(lines: int, name: str = "long", indent: str = "") -> str:
    """A function of exactly `lines` lines, its `def` included."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 2))
    return f"{indent}def {name}():\n{body}{indent}    return 0\n"


def write(root: Path, path: str, source: str) -> None:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(source)


def test_a_product_function_of_81_lines_fails_with_one_line_naming_it(tmp_path, capsys):
    write(tmp_path, "search/steps.py", "import os\n\n\n" + function_of(81))
    assert checker.check_lengths(tmp_path, allowed=frozenset()) == 1
    assert capsys.readouterr().out == "search/steps.py:4 long: 81 lines (limit 80)\n"


def test_methods_and_nested_functions_are_named_by_where_they_are(tmp_path, capsys):
    nested = "def outer():\n" + function_of(81, "inner", indent="    ") + "    return inner\n"
    write(tmp_path, "serving/a.py", "class Server:\n" + function_of(82, "start", indent="    ") + "\n" + nested)
    assert checker.check_lengths(tmp_path, allowed=frozenset()) == 1
    assert capsys.readouterr().out.splitlines() == [
        "serving/a.py:2 Server.start: 82 lines (limit 80)",
        "serving/a.py:85 outer: 83 lines (limit 80)",
        "serving/a.py:86 outer.inner: 81 lines (limit 80)",
    ]


def test_80_lines_pass_and_only_the_product_packages_are_held_to_it(tmp_path, capsys):
    write(tmp_path, "objectives/ok.py", function_of(80))
    for elsewhere in ("tests/unit/test_x.py", "benchmarks/bench_x.py", "scripts/x.py"):
        write(tmp_path, elsewhere, function_of(200))
    assert checker.check_lengths(tmp_path, allowed=frozenset()) == 0
    assert capsys.readouterr().out == ""


def test_an_allowed_function_passes_and_one_back_within_the_limit_is_said(tmp_path, capsys):
    write(tmp_path, "loadgen/loadrun.py", function_of(120, "run_load"))
    allowed = frozenset({("loadgen/loadrun.py", "run_load"), ("loadgen/client.py", "send")})
    assert checker.check_lengths(tmp_path, allowed=allowed) == 0
    assert capsys.readouterr().out == (
        "note: loadgen/client.py send is allowed over 80 lines but no longer is: drop it from ALLOWED_LONG\n"
    )


def test_a_product_module_of_401_lines_fails_with_one_line_naming_it(tmp_path, capsys):
    write(tmp_path, "loadgen/ok.py", "x = 0\n" * 400)
    write(tmp_path, "loadgen/long.py", "x = 0\n" * 401)
    write(tmp_path, "tests/unit/test_long.py", "x = 0\n" * 900)
    assert checker.check_module_lengths(tmp_path) == 1
    assert capsys.readouterr().out == "loadgen/long.py: 401 lines (module limit 400)\n"


def test_the_repository_passes(capsys):
    assert checker.main(["--root", str(REPO)]) == 0
    assert capsys.readouterr().out == ""


def test_the_parameter_limit_is_ruffs_at_eight_for_the_product_packages_only():
    ruff = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert "PLR0913" in ruff["select"] and ruff["pylint"]["max-args"] == 8
    outside = {pattern for pattern, rules in ruff["per-file-ignores"].items() if "PLR0913" in rules}
    assert "!{app,search,serving,objectives,loadgen,storage,vllm_http}/**" in outside


MYPY = """
[tool.mypy]
files = ["storage", "search/executor", "search/study/recording.py"]

[[tool.mypy.overrides]]
module = ["storage.loose", "search.executor.sub.*"]
ignore_errors = true
"""


@pytest.mark.parametrize(
    ("path", "line"),
    [
        ("app/cli.py", "app/cli.py: app.cli is not checked by mypy (not under [tool.mypy] files)"),
        (
            "search/study/loop.py",
            "search/study/loop.py: search.study.loop is not checked by mypy (not under [tool.mypy] files)",
        ),
        (
            "storage/loose.py",
            "storage/loose.py: storage.loose has its mypy errors ignored (ignore_errors in [[tool.mypy.overrides]])",
        ),
        (
            "search/executor/sub/__init__.py",
            "search/executor/sub/__init__.py: search.executor.sub has its mypy errors ignored (ignore_errors in [[tool.mypy.overrides]])",
        ),
    ],
)
def test_a_product_module_mypy_does_not_check_fails_the_coverage(tmp_path, capsys, path, line):
    (tmp_path / "pyproject.toml").write_text(MYPY)
    for covered in ("storage/queries.py", "search/executor/trial.py", "search/study/recording.py", "tests/x.py"):
        write(tmp_path, covered, "")
    assert checker.check_mypy_coverage(tmp_path) == 0
    write(tmp_path, path, "")
    assert checker.check_mypy_coverage(tmp_path) == 1
    assert capsys.readouterr().out == line + "\n"


def test_two_product_modules_of_one_name_fail_with_one_line_naming_both(tmp_path, capsys):
    write(tmp_path, "serving/context.py", "X = 1\n")
    write(tmp_path, "search/study/context.py", "Y = 1\n")
    write(tmp_path, "search/__init__.py", "")
    write(tmp_path, "serving/__init__.py", "")
    write(tmp_path, "tests/unit/context.py", "Z = 1\n")  # not a product module
    assert checker.check_module_names(tmp_path) == 1
    assert capsys.readouterr().out == "context.py: search/study/context.py, serving/context.py share a module name\n"


def test_the_repository_shares_no_module_name(capsys):
    assert checker.check_module_names(REPO) == 0, capsys.readouterr().out
