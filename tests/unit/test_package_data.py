"""The shipped scenarios and model shapes are package data of `configs`: every file under configs/
is matched by a pattern of pyproject.toml's `tool.setuptools.package-data` (else a wheel lacks it
while a checkout has it), and the tuner finds them through the package, as an install does
(tests/integration/test_install_beside_vllm.py installs one)."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from importlib import resources
from pathlib import Path

from search import scenario
from tests.support.paths import REPO

SETUPTOOLS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
CONFIGS = REPO / "configs"


def _data_files() -> list[Path]:
    """Every file under configs/ besides the package's module and Python's caches."""
    return sorted(
        p
        for p in CONFIGS.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.relative_to(CONFIGS) != Path("__init__.py")
    )


def test_configs_is_a_package_that_setuptools_finds():
    assert (CONFIGS / "__init__.py").is_file()
    assert any(fnmatch("configs", pattern) for pattern in SETUPTOOLS["packages"]["find"]["include"])


def test_every_file_under_configs_is_package_data_and_every_pattern_matches_one():
    patterns = SETUPTOOLS["package-data"]["configs"]
    matched = {pattern: {p for p in CONFIGS.glob(pattern) if p.is_file()} for pattern in patterns}
    files = _data_files()
    assert {p.suffix for p in files} >= {".yaml", ".json"}
    left_out = [str(p.relative_to(REPO)) for p in files if not any(p in found for found in matched.values())]
    assert not left_out, f"not shipped in a wheel (pyproject.toml, tool.setuptools.package-data): {left_out}"
    assert all(matched.values()), f"patterns that match no file: {[k for k, v in matched.items() if not v]}"


def test_the_shipped_scenarios_are_found_through_the_configs_package():
    assert scenario.CONFIG_DIR == Path(str(resources.files("configs"))).resolve() == CONFIGS
    assert not (REPO / "search" / "scenarios").exists()  # no link into configs/ any more
    shipped = sorted(p.stem for p in scenario.CONFIG_DIR.glob("*.yaml"))
    assert shipped == sorted(p.stem for p in CONFIGS.glob("*.yaml")) and "mixed" in shipped
    assert scenario.load("mixed")[2] == "configs/mixed.yaml"
