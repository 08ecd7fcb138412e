"""A study resumes on another machine with the same GPU model and vLLM build (the next lease of an
H100: another host, CPU and RAM, a driver that reports the memory a GiB lower), and is refused on
another GPU model; on the CPU build the machine is its CPU, cores and RAM, as before."""

from dataclasses import replace
from types import SimpleNamespace

from search.study import setup_changes
from serving import Gpu
from tests.support.fakes import CPU, H100, ctx

OTHER_HOST = replace(H100, cpu_model="another", cpu_cores=64, ram_gib=512, gpus=(Gpu("NVIDIA H100 80GB HBM3", 79.2),))
H200 = replace(H100, gpus=(Gpu("NVIDIA H200", 139.8),))


def stored(hw, version="0.26.0"):
    """A study's record as it was begun on `hw`."""
    c = ctx(version, hw=hw)
    return SimpleNamespace(
        vllm_version=c.installed.label(),
        model_path=c.model.reference,
        model_revision=c.model.revision,
        hardware=hw.as_dict(),
    )


def test_another_host_with_the_same_gpu_model_and_vllm_build_resumes_the_study():
    assert setup_changes(stored(H100), ctx("0.26.0", hw=OTHER_HOST)) == []


def test_another_gpu_model_is_refused():
    (change,) = setup_changes(stored(H100), ctx("0.26.0", hw=H200))
    assert change == "hardware was 1x NVIDIA H100 80GB HBM3, now 1x NVIDIA H200"


def test_another_vllm_build_is_refused():
    assert [c.split(" was ")[0] for c in setup_changes(stored(H100), ctx("0.32.0", hw=OTHER_HOST))] == ["vLLM"]


def test_on_the_cpu_another_machine_is_another_machine():
    assert setup_changes(stored(CPU, "0.32.0"), ctx("0.32.0", hw=replace(CPU, cpu_cores=4))) != []
