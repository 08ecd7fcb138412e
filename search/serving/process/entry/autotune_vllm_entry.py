"""The vLLM API server's entry when the tuner starts it: vLLM's API server module run as
`__main__`, with its EngineCore forked from an interpreter that has already imported vLLM
instead of spawned as a fresh one.

vLLM starts an EngineCore process, which starts a worker; the CPU build forces multiprocessing's
`spawn` for both, so each is a new interpreter importing torch and vLLM again, one after the
other (measured here: 7-8 s each, of a 25-28 s start). Here a `forkserver` is started first
thing and imports the EngineCore's modules while this process imports the API server's (two cores
work at once instead of one after another), and the EngineCore is forked from it (`spawn` ->
`forkserver` in this process only). A forked child is given the environment its parent had when
it started it (vLLM sets variables for its children just before), which a forkserver child would
otherwise not see.

The worker is still spawned by the EngineCore, as vLLM does. Forked from the EngineCore it
started in 1 s instead of 8, but served worse (benchmarks/startup.py --compare, 3 starts each,
2026-11-25: TTFT p95 188 ms against 50, TPOT p95 15.7 against 7.9): the EngineCore has run torch
by then, and a forked worker inherits its OpenMP state instead of binding its own threads.

This file is imported by path (it must not import the tuner's packages: the server may run in
another Python environment than the tuner's).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
import os
import runpy

# What the EngineCore imports before it serves (the forkserver imports it once).
PRELOAD = ["torch", "vllm.v1.engine.core", "vllm.v1.executor.multiproc_executor"]

_get_context = multiprocessing.get_context


class EnvForkServerProcess(multiprocessing.context.ForkServerProcess):
    """A forkserver child with its parent's environment as of `start()`."""

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
        super().run()


class EnvForkServerContext(multiprocessing.context.ForkServerContext):
    Process = EnvForkServerProcess


_FORKSERVER = EnvForkServerContext()


def _forkserver_for_spawn(method: str | None = None):
    return _FORKSERVER if method == "spawn" else _get_context(method)


def install() -> None:
    multiprocessing.set_forkserver_preload(PRELOAD)
    multiprocessing.forkserver.ensure_running()  # starts importing now, beside this process
    multiprocessing.get_context = _forkserver_for_spawn


def main(api_module: str) -> None:
    install()
    runpy.run_module(api_module, run_name="__main__")
