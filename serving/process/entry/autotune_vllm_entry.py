"""The vLLM API server's entry when the tuner starts it: vLLM's API server module run as
`__main__`, with its EngineCore and the EngineCore's worker forked from an interpreter that has
already imported vLLM instead of spawned as fresh ones.

vLLM starts an EngineCore process, which starts a worker; the CPU build forces multiprocessing's
`spawn` for both, so each is a new interpreter importing torch and vLLM again, one after the
other (a large share of a start: docs/results.md, "Server starts"). Here a `forkserver` is started first
thing and imports the EngineCore's modules while this process imports the API server's (two cores
work at once instead of one after another). Every `spawn` of this process and of its forkserver
children becomes a fork from that forkserver: the EngineCore, and the worker the EngineCore starts
(each forked child is handed the forkserver's address). A forked child is given the environment
its parent had when it started it (vLLM sets variables for its children just before), which a
forkserver child would otherwise not see.

A forked child must run as a spawned one would, and a spawned one loads its libraries and its
OpenMP settings from the environment it is exec'd with, which a fork cannot do afterwards. vLLM's
CPU platform sets LD_PRELOAD (PyTorch's libgomp, and its bundled tcmalloc) before it starts its
children, and gives the worker OMP_NUM_THREADS and GOMP_CPU_AFFINITY (here: 1 thread, bound to
CPU 0, the other CPU left to the API server, the EngineCore and the load client). Forked without
them the worker started in 1 s instead of 8 but ran 2 OpenMP threads unbound and served
markedly worse (docs/results.md, "Server starts"). So the
forkserver is exec'd with the LD_PRELOAD vLLM's rule gives (`vllm_ld_preload`); a forked child
applies the thread count and a one-CPU binding itself (`apply_openmp_env`); and a child whose
environment differs from the forkserver's in anything else that is read at exec is spawned as
before, with a line in the server log (`fork_blocker`).

This file is imported by path (it must not import the tuner's packages: the server may run in
another Python environment than the tuner's).
"""

from __future__ import annotations

import glob
import importlib.util
import multiprocessing
import multiprocessing.connection
import multiprocessing.context
import multiprocessing.forkserver
import multiprocessing.popen_forkserver
import multiprocessing.popen_spawn_posix
import multiprocessing.resource_tracker
import os
import runpy
import socket
import sys

# What the EngineCore imports before it serves (the forkserver imports it once).
PRELOAD = ["torch", "vllm.v1.engine.core", "vllm.v1.executor.multiproc_executor"]

_get_context = multiprocessing.get_context
_forkserver_env: dict[str, str] = {}  # the environment the forkserver was exec'd with


def _openmp_env(env: dict[str, str]) -> dict[str, str]:
    """The variables the OpenMP runtime reads once, when it is loaded (libgomp's, or also Intel's)."""
    prefixes = ("OMP_", "GOMP_") if "libgomp" in env.get("LD_PRELOAD", "") else ("OMP_", "GOMP_", "KMP_")
    return {k: v for k, v in env.items() if k.startswith(prefixes)}


def fork_blocker(env: dict[str, str], server_env: dict[str, str]) -> str | None:
    """Why a child whose parent's environment is `env` cannot be forked from a forkserver exec'd
    with `server_env`, or None. Libraries and OpenMP settings are fixed when a process is exec'd;
    two settings vLLM gives a CPU worker (OMP_NUM_THREADS, and GOMP_CPU_AFFINITY naming one CPU)
    can be applied exactly after the fork (`apply_openmp_env`), nothing else can."""
    if env.get("LD_PRELOAD", "") != server_env.get("LD_PRELOAD", ""):
        return f"LD_PRELOAD {env.get('LD_PRELOAD', '')!r} is not the forkserver's {server_env.get('LD_PRELOAD', '')!r}"
    mine, theirs = _openmp_env(env), _openmp_env(server_env)
    for key in sorted(mine.keys() | theirs.keys()):
        if mine.get(key) == theirs.get(key) or (key in APPLIED_AFTER_FORK and mine.get(key, "").isdigit()):
            continue
        return f"{key}={mine.get(key)!r} is not the forkserver's {theirs.get(key)!r}"
    return None


def _bind_to_one_cpu(value: str) -> None:
    # libgomp binds the initial thread to the first CPU listed; later threads inherit the binding
    os.sched_setaffinity(0, {int(value)})


def _set_thread_count(value: str) -> None:
    import torch  # imported by the forkserver already

    torch.set_num_threads(int(value))  # libgomp's nthreads-var (and MKL's), as OMP_NUM_THREADS at load


APPLIED_AFTER_FORK = {"GOMP_CPU_AFFINITY": _bind_to_one_cpu, "OMP_NUM_THREADS": _set_thread_count}


def apply_openmp_env(env: dict[str, str], server_env: dict[str, str]) -> None:
    """In a forked child: what the OpenMP runtime would have read from `env` had it been loaded
    now (only the settings `fork_blocker` lets through)."""
    for key, apply in APPLIED_AFTER_FORK.items():
        if key in env and env[key] != server_env.get(key):
            apply(env[key])


class EnvForkServerProcess(multiprocessing.context.ForkServerProcess):
    """A forkserver child with its parent's environment as of `start()`; spawned instead where
    that environment cannot be had by a fork (`fork_blocker`)."""

    _parent_environ: dict[str, str]
    _forkserver_address: str
    _forkserver_env: dict[str, str]
    _forked: bool  # set by `_Popen`, in the parent, and carried to the child with the rest

    def start(self) -> None:
        self._parent_environ = dict(os.environ)
        # multiprocessing's private state, which typeshed does not declare (likewise below)
        self._forkserver_address = multiprocessing.forkserver._forkserver._forkserver_address  # type: ignore[attr-defined]
        self._forkserver_env = _forkserver_env
        super().start()

    @staticmethod
    def _Popen(process_obj):
        why = fork_blocker(process_obj._parent_environ, process_obj._forkserver_env)
        process_obj._forked = why is None
        if why is None:
            return multiprocessing.popen_forkserver.Popen(process_obj)
        print(f"autotune entry: {why}: this child is spawned", file=sys.stderr, flush=True)
        return multiprocessing.popen_spawn_posix.Popen(process_obj)

    def run(self) -> None:
        if self._forked:
            try:  # before the environment changes: setproctitle finds its memory from the original one
                import setproctitle  # (vLLM titles its processes; the client's CPU pinning reads them)

                setproctitle.getproctitle()
            except ImportError:
                pass
            os.environ.clear()
            os.environ.update(self._parent_environ)
            apply_openmp_env(self._parent_environ, self._forkserver_env)
            _adopt_forkserver(self._forkserver_address, self._forkserver_env)
            # The tuner's plugin, as in the API server (an exec'd forkserver never activated it;
            # one forked from an activated server did, and this is then a no-op).
            import autotune_vllm_plugin  # type: ignore[import-not-found]  # checked as serving.process.entry...

            autotune_vllm_plugin.activate()
        super().run()


class EnvForkServerContext(multiprocessing.context.ForkServerContext):
    Process = EnvForkServerProcess


_FORKSERVER = EnvForkServerContext()


def _forkserver_for_spawn(method: str | None = None):
    return _FORKSERVER if method == "spawn" else _get_context(method)


def _adopt_forkserver(address, server_env: dict[str, str]) -> None:
    """In a forkserver child: its own `spawn`s go to the same forkserver. The child holds the
    server's "alive" fd already (multiprocessing hands it over); it lacks the address, and must
    not relaunch a server it cannot waitpid() on (the server is its parent, not its child)."""
    global _forkserver_env
    _forkserver_env = server_env
    server = multiprocessing.forkserver._forkserver
    server._forkserver_address = address  # type: ignore[attr-defined]
    server.ensure_running = multiprocessing.resource_tracker.ensure_running  # type: ignore[method-assign]
    multiprocessing.get_context = _forkserver_for_spawn


def _package_dir(name: str) -> str | None:
    spec = importlib.util.find_spec(name)  # without importing it (seconds, for torch and vllm)
    return spec.submodule_search_locations[0] if spec and spec.submodule_search_locations else None


def vllm_ld_preload(current: str) -> str:
    """The LD_PRELOAD vLLM's CPU platform sets for its children (vllm/platforms/cpu.py,
    `check_and_update_config`, vLLM 0.32): PyTorch's libgomp appended unless an OpenMP runtime is
    preloaded already, its bundled tcmalloc prepended unless one is. Found without importing
    either package. Where this differs from what vLLM sets, children are spawned, not forked."""
    value = current
    torch_dir, vllm_dir = _package_dir("torch"), _package_dir("vllm")
    if torch_dir and not any(lib in value for lib in ("libomp", "libgomp", "libiomp")):
        found = [
            so
            for d in (os.path.join(os.path.dirname(torch_dir), "torch.libs"), os.path.join(torch_dir, "lib"))
            for so in glob.glob(os.path.join(d, "libgomp*.so*"))
        ]
        if found:
            value = f"{value}:{found[0]}" if value else found[0]
    if vllm_dir and "libtcmalloc" not in value:
        for pattern in ("libtcmalloc_minimal*.so*", "libtcmalloc.so*"):
            found = glob.glob(os.path.join(vllm_dir, "libs", pattern))
            if found:
                value = f"{found[0]}:{value}" if value else found[0]
                break
    return value


def install() -> None:
    global _forkserver_env
    current = os.environ.get("LD_PRELOAD", "")
    multiprocessing.set_forkserver_preload(PRELOAD)
    os.environ["LD_PRELOAD"] = vllm_ld_preload(current)
    _forkserver_env = dict(os.environ)
    try:
        multiprocessing.forkserver.ensure_running()  # starts importing now, beside this process
    finally:
        if current:
            os.environ["LD_PRELOAD"] = current
        else:
            del os.environ["LD_PRELOAD"]
    multiprocessing.get_context = _forkserver_for_spawn


def fork_forkserver(server_env: dict[str, str]) -> None:
    """`install` for a process that has imported what the forkserver would (the study's zygote
    forked it): the forkserver is forked from it before it runs anything, rather than exec'd to
    import it all again. `server_env` is the environment this process was exec'd with."""
    global _forkserver_env
    address = multiprocessing.connection.arbitrary_address("AF_UNIX")  # type: ignore[attr-defined]
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(address)
    os.chmod(address, 0o600)
    listener.listen()
    alive_r, alive_w = os.pipe()  # as ForkServer.ensure_running: EOF once every client has gone
    pid = os.fork()
    if pid == 0:
        os.close(alive_w)
        try:
            multiprocessing.forkserver.main(listener.fileno(), alive_r, [])
        finally:
            os._exit(0)
    os.close(alive_r)
    listener.close()
    server = multiprocessing.forkserver._forkserver
    server._forkserver_address, server._forkserver_alive_fd, server._forkserver_pid = address, alive_w, pid  # type: ignore[attr-defined]
    _forkserver_env = server_env
    multiprocessing.get_context = _forkserver_for_spawn


def main(api_module: str, forkserver: bool = True) -> None:
    """vLLM's API server as `__main__`, with the tuner's plugin where the tuner turned it on, and
    (`forkserver`: the CPU build, which spawns its children) the forkserver. On a GPU vLLM forks
    its EngineCore itself where the tuner asked it to (VLLM_WORKER_MULTIPROC_METHOD=fork) and no
    CUDA context exists yet."""
    import autotune_vllm_plugin  # beside this file, on the path the tuner's command line gave

    autotune_vllm_plugin.activate()
    if forkserver:
        install()
    runpy.run_module(api_module, run_name="__main__")
