"""The GPUs a server started here sees: nvidia-smi's list as CUDA_VISIBLE_DEVICES picks it."""

import subprocess

import pytest

from serving import machine
from serving.machine import Gpu

SMI = (
    "0, GPU-aaaa1111-0000, NVIDIA H100 80GB HBM3, 81559\n"
    "1, GPU-bbbb2222-0000, NVIDIA H100 80GB HBM3, 81559\n"
    "2, GPU-cccc3333-0000, NVIDIA L4, 23034\n"
)
H100, L4 = Gpu("NVIDIA H100 80GB HBM3", 81559 / 1024), Gpu("NVIDIA L4", 23034 / 1024)


@pytest.fixture
def smi(monkeypatch):
    monkeypatch.delenv("AUTOTUNE_FORCE_CPU", raising=False)
    monkeypatch.setattr(machine.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(
        machine.subprocess, "run", lambda *a, **kw: subprocess.CompletedProcess(a, 0, stdout=SMI, stderr="")
    )
    return monkeypatch


@pytest.mark.parametrize(
    "visible, expected",
    [
        (None, (H100, H100, L4)),
        ("2,0", (L4, H100)),  # in the order given: the first is device 0
        ("GPU-bbbb", (H100,)),  # a UUID prefix
        ("1,7,2", (H100,)),  # CUDA stops at the first entry that names no GPU
        ("", ()),
    ],
)
def test_cuda_visible_devices_picks_the_gpus_in_its_order(smi, visible, expected):
    if visible is None:
        smi.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        smi.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert machine._nvidia_gpus() == expected


def test_a_worker_slot_of_one_gpu_is_a_one_gpu_machine(smi):
    smi.setenv("CUDA_VISIBLE_DEVICES", "1")
    hw = machine.detect()
    assert hw.is_gpu and hw.describe() == "1x NVIDIA H100 80GB HBM3 (80 GiB)"
