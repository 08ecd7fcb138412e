"""The CLI, run as a user runs it, finds a hub id through HF_HOME offline and refuses a missing one
before any server starts (the cache built from the built-in model).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from serving import build_default_model
from tests.support.hf_cache import COMMIT_A, COMMIT_B, add_snapshot
from tests.support.paths import REPO

REPO_ID = "autotune-test/tiny-llama"


@pytest.fixture(scope="module")
def built_in_model() -> Path:
    return build_default_model()


@pytest.fixture
def hf_home(tmp_path, built_in_model, monkeypatch) -> Path:
    """HF_HOME with the built-in model as REPO_ID at COMMIT_A (main) and COMMIT_B (tag v2), offline."""
    from huggingface_hub import constants

    home = tmp_path / "hf"
    add_snapshot(home / "hub", REPO_ID, built_in_model, COMMIT_A, refs=("main",))
    add_snapshot(home / "hub", REPO_ID, built_in_model, COMMIT_B, refs=("v2",))
    # The hub library reads these once, at import; the CLI's own process gets them from the environment.
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return home


def _autotune(*args, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**clean, "PYTHONPATH": str(REPO), **env},
        timeout=300,
    )


def test_the_cli_finds_a_hub_id_through_HF_HOME_offline_and_refuses_a_missing_one_before_any_server(hf_home, tmp_path):
    env = {"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from serving import read_model_info; i = read_model_info({REPO_ID!r}); print(i.path, i.revision)",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        timeout=120,
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.split() == [
        str((hf_home / "hub" / "models--autotune-test--tiny-llama" / "snapshots" / COMMIT_A).resolve()),
        COMMIT_A,
    ]

    runs = tmp_path / "runs"
    proc = _autotune("search", "mixed", "--model", "autotune-test/not-here", "--runs-dir", runs, env=env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(
        "autotune: error: model autotune-test/not-here: no such local directory, and not "
        f"(completely) in the Hugging Face cache at {hf_home / 'hub'}; downloads are off"
    )
    assert "download autotune-test/not-here`" in line
    assert not runs.exists() or not any(runs.rglob("*.log"))  # no server was started
