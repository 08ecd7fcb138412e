"""The vLLM API server's entry when the tuner starts it: vLLM's API server module run as
`__main__`, with its two child processes started from interpreters that have already imported
vLLM instead of fresh ones.

vLLM starts an EngineCore process, which starts a worker; the CPU build forces multiprocessing's
`spawn` for both, so each is a new interpreter importing torch and vLLM again, one after the
other (measured here: 7 s each, of a 24 s start). Here:

* a `forkserver` is started first thing, and imports the engine's and the worker's modules while
  this process imports the API server's (two cores work at once instead of one after another);
* the EngineCore is forked from it (`spawn` -> `forkserver` in this process), and
* the worker is forked from the EngineCore, which has imported everything it needs (`spawn` ->
  `fork` in the EngineCore, before it has started any compute thread).

The same vLLM code runs with the same flags and environment: a forked child is given the
environment its parent had when it started it (vLLM sets variables for its children just before),
which a forkserver child would otherwise not see. benchmarks/startup.py --compare measures the
start and the served metrics against the previous entry, interleaved.

This file is imported by path (it must not import the tuner's packages: the server may run in
another Python environment than the tuner's).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
import os
import runpy

# What the EngineCore and its worker import before they serve (the forkserver imports it once).
PRELOAD = ["torch", "vllm.v1.engine.core", "vllm.v1.executor.multiproc_executor",
           "vllm.v1.worker.cpu_worker", "vllm.v1.worker.cpu_model_runner"]

_get_context = multiprocessing.get_context


class EnvForkServerProcess(multiprocessing.context.ForkServerProcess):
    """A forkserver child with its parent's environment as of `start()`; in the child, a `spawn`
    asked for is a `fork` (the EngineCore's worker)."""

    def start(self) -> None:
        self._parent_environ = dict(os.environ)
        super().start()

    def run(self) -> None:
        try:  # before the environment changes: setproctitle finds its memory from the original one
            import setproctitle  # (vLLM titles its processes; the client's CPU pinning reads them)
            setproctitle.getproctitle()
        except ImportError:
            pass
        os.environ.clear()
        os.environ.update(self._parent_environ)
        multiprocessing.get_context = _fork_for_spawn
        super().run()


class EnvForkServerContext(multiprocessing.context.ForkServerContext):
    Process = EnvForkServerProcess


_FORKSERVER = EnvForkServerContext()


def _forkserver_for_spawn(method: str | None = None):
    return _FORKSERVER if method == "spawn" else _get_context(method)


def _fork_for_spawn(method: str | None = None):
    if method == "spawn" and not _cuda_initialized():
        method = "fork"
    return _get_context(method)


def _cuda_initialized() -> bool:
    """A process that has initialized CUDA must not fork (the tuner starts this entry on CPU
    builds only; this guards a GPU build that reaches it anyway)."""
    import sys
    torch = sys.modules.get("torch")
    return bool(torch is not None and hasattr(torch, "cuda") and torch.cuda.is_initialized())


def install() -> None:
    multiprocessing.set_forkserver_preload(PRELOAD)
    multiprocessing.forkserver.ensure_running()  # starts importing now, beside this process
    multiprocessing.get_context = _forkserver_for_spawn


def main(api_module: str) -> None:
    install()
    runpy.run_module(api_module, run_name="__main__")
