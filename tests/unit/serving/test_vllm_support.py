"""The oldest supported vLLM: an older one is refused in one line (exit 2) before its flags are
read or anything starts, and pyproject asks for no vLLM outside its extras."""

import tomllib

import pytest
from packaging.requirements import Requirement

from serving import OLDEST_SUPPORTED_VLLM, VllmNotInstalled
from serving.machine import check_supported
from tests.support.paths import REPO


@pytest.mark.parametrize("version", ["0.26.0", "0.26.1", "0.32.0", "1.0.0", "0.26.0+cu130"])
def test_the_oldest_supported_vllm_and_newer_pass(version):
    check_supported("vllm", version)


def test_an_older_vllm_is_one_line_saying_what_is_installed_and_what_is_needed():
    with pytest.raises(VllmNotInstalled) as e:
        check_supported("vllm", "0.25.2")
    assert str(e.value) == (
        f"the installed vllm 0.25.2 is older than {OLDEST_SUPPORTED_VLLM}, the oldest vLLM this "
        f"tuner supports: upgrade it (pip install 'vllm>={OLDEST_SUPPORTED_VLLM}'), or use an "
        f"image with a newer one"
    )


def test_autotune_refuses_an_old_vllm_with_exit_2_before_reading_its_flags(monkeypatch, capsys):
    from app.cli import main
    from serving import context, machine

    monkeypatch.setattr(machine, "installed_vllm", lambda: ("vllm", "0.20.1"))

    def never():
        raise AssertionError("the flags of an unsupported vLLM were read")

    monkeypatch.setattr(context, "load_installed", never)
    assert main(["params"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("autotune: error: the installed vllm 0.20.1 is older than ")


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_installing_the_project_asks_for_no_vllm_and_the_gpu_extra_starts_at_the_oldest_supported():
    project = _pyproject()
    assert not [r for r in map(Requirement, project["dependencies"]) if r.name.startswith("vllm")]
    [gpu] = map(Requirement, project["optional-dependencies"]["gpu"])
    assert gpu.name == "vllm" and str(gpu.specifier) == f">={OLDEST_SUPPORTED_VLLM}"
