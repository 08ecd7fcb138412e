"""`pip install` of the project into an environment that already has vLLM: offline (no index, no
build isolation), with pip resolving the dependencies against what is installed. vLLM is neither
reinstalled nor upgraded, and `autotune` runs from outside the repository with the shipped
scenarios found by name in the installed `configs` package (package data, no link into the checkout).

The environment: a fresh venv that sees this test's environment (vLLM and every dependency in it)
through a .pth file, as a venv made with --system-site-packages sees an image's system Python."""

import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from search.scenario import CONFIG_DIR
from serving.machine import installed_vllm
from tests.support.paths import REPO

SOURCES = (
    "pyproject.toml",
    "README.md",
    "app",
    "search",
    "serving",
    "objectives",
    "loadgen",
    "storage",
    "vllm_http",
    "configs",
)


def _run(*args, cwd: Path, timeout: int = 240) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # no find-links or index from this machine's pip configuration
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _venv_seeing_this_environment(where: Path) -> Path:
    base = getattr(sys, "_base_executable", sys.executable)
    assert _run(base, "-m", "venv", "--without-pip", where, cwd=where.parent).returncode == 0
    [site] = (where / "lib").glob("python3*/site-packages")
    shared = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
    (site / "shared-environment.pth").write_text("".join(f"{p}\n" for p in sorted(shared)))
    return where / "bin"


def test_pip_install_beside_an_installed_vllm_keeps_it_and_autotune_runs_outside_the_repository(tmp_path):
    before = installed_vllm()
    assert before is not None, "this test needs vLLM installed"
    vllm_files = importlib.metadata.distribution(before[0]).files
    src = tmp_path / "src"  # a copy: an in-tree build would leave build/ in the checkout
    src.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, src / name)
    bin_dir = _venv_seeing_this_environment(tmp_path / "env")

    pip = _run(
        bin_dir / "python",
        "-m",
        "pip",
        "install",
        "--no-index",
        "--no-build-isolation",
        "--no-cache-dir",
        "--disable-pip-version-check",
        src,
        cwd=tmp_path,
    )
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    [installing] = [line for line in pip.stdout.splitlines() if line.startswith("Installing collected packages")]
    assert installing == "Installing collected packages: vllm-autotune"  # every dependency was already there

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert _run(bin_dir / "autotune", "--help", cwd=elsewhere).returncode == 0
    params = _run(bin_dir / "autotune", "params", cwd=elsewhere)
    assert params.returncode == 0, params.stderr[-3000:]
    assert f"Tunable parameters on {before[0]} {before[1]}" in params.stdout

    probe = _run(
        bin_dir / "python",
        "-c",
        "import search.scenario as s; from serving.machine import "
        "installed_vllm; print(s.__file__); print(s.CONFIG_DIR); "
        "print(*sorted(f.stem for f in s.CONFIG_DIR.glob('*.yaml'))); "
        "print(*sorted(f.name for f in (s.CONFIG_DIR / 'models').iterdir())); "
        "print(s.load('mixed')[0].name); print(*installed_vllm())",
        cwd=elsewhere,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    module, config_dir, shipped, models, loaded, vllm = probe.stdout.splitlines()
    assert Path(module).is_relative_to(tmp_path / "env")  # the installed copy, not the checkout
    assert Path(config_dir).is_relative_to(tmp_path / "env")  # the scenarios too
    assert shipped.split() == sorted(f.stem for f in CONFIG_DIR.glob("*.yaml")) and loaded == "mixed"
    assert models.split() == sorted(f.name for f in (CONFIG_DIR / "models").iterdir())
    assert tuple(vllm.split()) == before
    assert installed_vllm() == before and importlib.metadata.distribution(before[0]).files == vllm_files
