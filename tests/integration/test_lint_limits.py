"""The parameter limit as ruff applies it (PLR0913, max-args 8 in pyproject.toml) and the import
contracts as import-linter applies them, each on a copy of the repository's configuration beside a
violator (and the parameter limit on the repository itself). Both are processes of their own, hence
here; the function length checker's tests are tests/unit/test_lint_limits.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO

RUFF = Path(sys.executable).parent / "ruff"

SOURCE = """
def eight(a, b, c, d, e, f, g, h):
    return a


def nine(a, b, c, d, e, f, g, h, i):
    return a


def nine_by_keyword(a, b, c, d, *, e, f, g, h, i):
    return a


class Server:
    def start(self, a, b, c, d, e, f, g, h):
        return a
"""


def ruff_params(root: Path, *paths: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(RUFF), "check", "--no-cache", "--select", "PLR0913", "--output-format", "concise", *paths],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_product_function_of_nine_parameters_fails_under_the_repositorys_config(tmp_path):
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    for where in ("search/violator.py", "tests/unit/test_violator.py", "benchmarks/violator.py"):
        (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / where).write_text(SOURCE)
    proc = ruff_params(tmp_path, ".")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    flagged = [line.split(": ", 1)[0] for line in proc.stdout.splitlines() if "PLR0913" in line]
    # keyword-only parameters count, self does not; only the product packages are held to it
    assert flagged == ["search/violator.py:6:5", "search/violator.py:10:5"]


def test_the_repository_passes_the_parameter_limit():
    proc = ruff_params(REPO, ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
ROOT_PACKAGES = ("benchmarks", "app", "search", "serving", "objectives", "loadgen", "storage", "vllm_http", "configs")


def test_an_import_against_the_layers_breaks_exactly_that_contract(tmp_path):
    """The import contracts as `make lint` runs them (import-linter, pyproject.toml), on a copy
    of the repository's packages with one module of the server library importing the judge
    above it: that contract, and only it, breaks, naming the import."""
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    for package in ROOT_PACKAGES:
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "data"))
    (tmp_path / "serving" / "violation.py").write_text("from objectives import scoring\n")
    done = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr
    assert "Contracts: 16 kept, 1 broken." in done.stdout
    assert "the top level: the benchmarks over the application" in done.stdout
    assert "serving.violation -> objectives" in done.stdout
