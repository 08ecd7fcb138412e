"""What one server start is: the model, flags and log, the Python that runs it, and how the tuner
starts it (which entry, forked by the study's zygote or exec'd, with the tuner's plugin or not).
`server.VllmServer` starts what a LaunchSpec describes."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from serving.failures import DEFAULT_STARTUP_TIMEOUT_S
from serving.process import zygote, zygote_process

HOST = "127.0.0.1"
API_MODULE = "vllm.entrypoints.openai.api_server"
# The server's CPU priority below the tuner's (`server_guard.lower_priority` says why); 0 leaves it.
SERVER_NICE_ENV = "AUTOTUNE_SERVER_NICE"
SERVER_NICE = 10
# Set in the servers the tuner starts with its plugin (entry/autotune_vllm_plugin/ says what it
# does); the plugin's `activate` reads it, and nothing else does.
PLUGIN_ENV = "AUTOTUNE_VLLM_PLUGIN"


def lean_entry(api_module: str) -> str:
    """The API server module run as `__main__` from `-c`, not with `-m`. With `-m`,
    multiprocessing's spawn re-runs the main module in every process it starts: vLLM's
    EngineCore, and on a CPU its worker too (the CPU build forces spawn), each imported the whole
    HTTP stack it never serves (seconds per process: docs/results.md, "Server starts"). From `-c`
    the main module has no name or file, so a child imports only what it runs. The same vLLM code
    with the same flags: the same server (benchmarks/bench_startup.py --compare measures both,
    interleaved, under one load)."""
    return f"import runpy; runpy.run_module({api_module!r}, run_name='__main__')"


def tuner_entry(api_module: str, forkserver: bool) -> str:
    """`lean_entry` through the tuner's entry (entry/autotune_vllm_entry.py): the tuner's plugin
    where `PLUGIN_ENV` turns it on, and on the CPU build (`forkserver`) the EngineCore and its
    worker forked from a forkserver that imported vLLM beside the API server, not spawned afresh."""
    return (
        f"import sys; sys.path.insert(0, {str(zygote_process.ENTRY_DIR)!r}); import autotune_vllm_entry; "
        f"autotune_vllm_entry.main({api_module!r}, forkserver={forkserver!r})"
    )


LEAN_ENTRY = lean_entry(API_MODULE)
WARM_ENTRY = tuner_entry(API_MODULE, forkserver=True)


def server_nice() -> int:
    try:
        return max(0, int(os.environ.get(SERVER_NICE_ENV, SERVER_NICE)))
    except ValueError:
        return SERVER_NICE


@dataclass
class LaunchSpec:
    model: Path | None  # None: the args name it (e.g. via --config FILE)
    args: list[str]  # vLLM flags, without --model/--host/--port
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    python: str = sys.executable
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S
    stop_grace_s: float = 15.0
    gpu: bool = False
    lean_children: bool = True  # lean_entry; False: `-m API_MODULE` as before (the benchmark's old start)
    warm_children: bool = True  # the CPU build's children from a forkserver (with lean_children); False: spawned
    zygote: bool = True  # the server forked by the study's zygote rather than exec'd (see zygote.py)
    plugin: bool = True  # the tuner's vLLM plugin on (PLUGIN_ENV); False: vLLM as it is
    fork_engine: bool = True  # GPU: vLLM forks its EngineCore (VLLM_WORKER_MULTIPROC_METHOD=fork), not spawns it
    api_module: str = API_MODULE

    def server_argv(self, port: int) -> list[str]:
        """The API server's own arguments."""
        # The CPU build's `vllm` script crashes on a metadata lookup, so use the module entry;
        # it ignores a positional model, hence always --model.
        model = ["--model", str(self.model)] if self.model is not None else []
        return [*model, "--host", HOST, "--port", str(port), *self.args]

    def command(self, port: int, lean: bool | None = None) -> list[str]:
        if not (self.lean_children if lean is None else lean):
            entry = ["-m", self.api_module]
        elif self.through_tuner_entry:
            entry = ["-c", tuner_entry(self.api_module, forkserver=self.warm)]
        else:
            entry = ["-c", lean_entry(self.api_module)]
        return [self.python, *entry, *self.server_argv(port)]

    @property
    def warm(self) -> bool:
        """The CPU build's children from a forkserver. Not on a GPU: vLLM forks its EngineCore
        there itself (`fork_engine`) while no CUDA context exists."""
        return self.lean_children and self.warm_children and not self.gpu

    @property
    def through_tuner_entry(self) -> bool:
        return self.lean_children and (self.warm or self.plugin)

    @property
    def children(self) -> str:
        """How the server's children start: from the forkserver (CPU), or forked by vLLM (GPU)."""
        return zygote.FORKSERVER if self.warm else zygote.FORK

    @property
    def forked_by_zygote(self) -> bool:
        """On a CPU with the forkserver; on a GPU where vLLM forks its EngineCore (a spawned one
        would import vLLM again, and gain nothing from the zygote)."""
        return self.zygote and self.through_tuner_entry and (self.warm or (self.gpu and self.fork_engine))

    def tuner_env(self) -> dict[str, str]:
        """What the tuner sets in the server's environment for this start."""
        env = {}
        if self.gpu and self.fork_engine:
            env["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"  # vLLM still spawns where a CUDA context exists
        if self.plugin and self.through_tuner_entry:
            env[PLUGIN_ENV] = "1"
        return env
