"""The study's zygote: one interpreter, kept for the whole study, that has imported vLLM's API
server (and what its EngineCore runs) and forks one server per trial, instead of each trial
exec'ing a fresh `python` that imports torch and vLLM again (most of a start's time on a CPU:
docs/results.md, "Server starts").

Each server it forks is what `WARM_ENTRY` would have exec'd, with the same argv, environment,
log, CPU priority and process group:
- the zygote is exec'd with the trial's environment (the tuner starts one per environment and
  asks only the zygote whose environment is the trial's), plus the LD_PRELOAD vLLM's CPU
  platform gives its children (`vllm_ld_preload`: PyTorch's libgomp, vLLM's tcmalloc; libraries
  are loaded at exec, never after), taken out of `os.environ` again before anything is imported,
  so the server sees the environment a fresh one would;
- per request it forks a guard (`server_guard.watch`, forked instead of exec'd) that leads a new
  session, lowers its priority, points stdin/stdout/stderr where the exec'd server's went, and
  forks the API server, which forks its forkserver at once (`fork_forkserver`: it has run nothing
  yet) and runs vLLM's API server module as `__main__` with the request's argv;
- the guard kills the group when the tuner's pipe reads EOF, as the exec'd guard does; the
  zygote itself exits at once when its control socket does (the tuner is gone or closed it), or
  when the tuner, its parent, is gone.

On a GPU (mode "fork") the same, except that nothing CPU-specific happens: no LD_PRELOAD, no
forkserver; vLLM forks its EngineCore from the API server itself (the tuner sets
VLLM_WORKER_MULTIPROC_METHOD=fork). A process can be forked only while it has no CUDA context (a
child of one cannot use CUDA), so after its imports the zygote checks that none exists and
refuses to serve if one does (`cuda_context`), or if a child it forks cannot use CUDA
(`fork_cannot_use_cuda`, tried once): the tuner then execs every server. The modules the
EngineCore imports after the fork (its GPU worker) are imported only if a forked probe that
imported them first passed both checks too (`probe`).

Protocol (a SOCK_SEQPACKET socket the tuner made, fd in argv); a message with an fd attached is a
fork request, one without is a ping:
- before each fork request the tuner sends {"ping": N}, no fd; the zygote's loop answers
  {"pong": N} (it reads nothing while it imports: the tuner watches its CPU time meanwhile, and
  takes the first answer as the end of its imports);
- the fork request {"id", "argv", "log", "cwd", "nice", "title"} with the guard's pipe fd
  attached; the zygote answers {"id", "forked": PID} (PID leads the server's process group; null:
  the pipe was closed already, the tuner gave up on this start) and, when that guard exits,
  {"exited": PID, "code": C} (C as `subprocess.Popen.returncode`: negative for a signal).
A zygote that does not answer in time is killed by the tuner with its process group
(`serving/process/zygote.py`).

Imported by path: standard library, and this directory's modules, only.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import runpy
import select
import socket
import sys
import threading
import traceback

# This directory's modules, by the names the server's sys.path gives them. mypy checks each under
# its path in the tuner's package (serving.process.entry...) and cannot give one file two names.
import autotune_vllm_entry as entry  # type: ignore[import-not-found]
import autotune_vllm_plugin  # type: ignore[import-not-found]
import server_guard  # type: ignore[import-not-found]

MAX_MESSAGE = 1 << 20
FORKSERVER, FORK = "forkserver", "fork"  # the CPU build's children from a forkserver; vLLM's fork on a GPU
REFUSED = 3  # the zygote's exit code when a CUDA context exists: the tuner execs its servers


def cuda_context() -> bool:
    """Whether this process has initialised CUDA (torch's word; no torch imported: no)."""
    torch = sys.modules.get("torch")
    is_initialized = getattr(getattr(torch, "cuda", None), "is_initialized", None)
    return bool(is_initialized()) if callable(is_initialized) else False


def _in_a_child(run) -> int:
    """`run()`'s exit code in a forked child (1 if it raises): nothing it does reaches this process."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = run()
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _use_cuda() -> int:
    import torch

    torch.empty(1, device="cuda").add_(1)
    torch.cuda.synchronize()
    return 0


def fork_cannot_use_cuda() -> str | None:
    """Why a process forked from this one could not use CUDA, tried in a forked child (creating a
    context there, never here): torch's flag misses a driver initialised under it, say by a
    device count. None where it can, or where this torch has no tensors to try (a stand-in)."""
    if not hasattr(sys.modules.get("torch"), "empty"):
        return None
    code = _in_a_child(_use_cuda)
    return None if code == 0 else f"a process forked from it cannot use CUDA (exit code {code})"


def probe(modules: list[str]) -> str | None:
    """Import `modules` in a forked child first: None if they import without a CUDA context and
    a fork of that child can still use CUDA, else why they are left out (importing them here
    could not be undone)."""
    if not modules:
        return None

    def imported_cleanly() -> int:
        for name in modules:
            importlib.import_module(name)
        return REFUSED if cuda_context() or fork_cannot_use_cuda() else 0

    code = _in_a_child(imported_cleanly)
    if code == 0:
        return None
    return f"importing {', '.join(modules)} " + (
        "leaves CUDA unusable after a fork" if code == REFUSED else f"failed ({code})"
    )


def _set_title(title: str) -> None:
    try:
        import setproctitle  # vLLM's own dependency: it titles its processes too

        setproctitle.setproctitle(title)
    except ImportError:
        pass


def _exit_like_an_interpreter(code: int) -> None:
    """End a forked child as `python` would end: threads joined, atexit run (vLLM shuts its
    engine down there), streams flushed; never return into the zygote's loop."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # private to threading: typeshed leaves it out
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _run_api_server(api_module: str, argv: list[str], server_env: dict[str, str], mode: str) -> None:
    code = 1
    try:
        sys.argv = ["-c", *argv]  # as `python -c ENTRY ARGS...` has it
        autotune_vllm_plugin.activate()  # as `entry.main` does for an exec'd server
        if mode == FORKSERVER:
            entry.fork_forkserver(server_env)
        sys.modules.pop(api_module, None)  # run as __main__ afresh, as from WARM_ENTRY
        runpy.run_module(api_module, run_name="__main__")
        code = 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    _exit_like_an_interpreter(code)


def _exit_code(pid: int) -> int | None:
    done, status = os.waitpid(pid, os.WNOHANG)
    return os.waitstatus_to_exitcode(status) if done else None


def _guard(request: dict, pipe_fd: int, led_w: int, api_module: str, server_env: dict[str, str], mode: str) -> None:
    """The forked guard: a new session, the server's priority and streams, the server as its
    child; exits with the server's exit code."""
    code = 1
    try:
        os.setsid()
        os.close(led_w)
        server_guard.lower_priority(int(request["nice"]))
        log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        os.chdir(request["cwd"])
        _set_title(f"server_guard (forked by the zygote) {pipe_fd}")
        pid = os.fork()
        if pid == 0:
            os.close(pipe_fd)
            _set_title(request["title"])
            _run_api_server(api_module, request["argv"], server_env, mode)
        code = server_guard.watch(pipe_fd, lambda: _exit_code(pid))
    except BaseException:
        traceback.print_exc()
    os._exit(code)


def _send(ctl: socket.socket, message: dict) -> None:
    try:
        ctl.send(json.dumps(message).encode())
    except OSError:  # the tuner is gone: the next read says so
        pass


def _at_eof(fd: int) -> bool:
    """The pipe's write end is closed (nothing is ever written to it)."""
    return bool(select.select([fd], [], [], 0)[0])


def serve(ctl: socket.socket, api_module: str, server_env: dict[str, str], mode: str, tuner: int) -> None:
    guards: set[int] = set()
    while True:
        ready, _, _ = select.select([ctl], [], [], 0.2)
        if os.getppid() != tuner:  # the tuner is gone, even if the socket's EOF has not come
            return
        for pid in list(guards):
            code = _exit_code(pid)
            if code is not None:
                guards.discard(pid)
                _send(ctl, {"exited": pid, "code": code})
        if not ready:
            continue
        data, fds, _, _ = socket.recv_fds(ctl, MAX_MESSAGE, 1)
        if not data:  # the tuner is gone, or done with this zygote; each guard watches the tuner itself
            return
        message = json.loads(data)
        if not fds:  # a ping: this loop runs
            _send(ctl, {"pong": message.get("ping")})
            continue
        _fork_guard(ctl, message, fds[0], guards, api_module, server_env, mode)


def _fork_guard(
    ctl: socket.socket,
    request: dict,
    pipe_fd: int,
    guards: set[int],
    api_module: str,
    server_env: dict[str, str],
    mode: str,
) -> None:
    """Answer one fork request: the guard forked (its pid, once it leads its group), or nothing
    forked where the tuner gave up on the start."""
    if cuda_context():  # never forked: its servers could not use the GPU
        print("autotune zygote: a CUDA context exists; refusing to fork", flush=True)
        os._exit(REFUSED)
    if _at_eof(pipe_fd):  # the tuner gave up on this start already
        os.close(pipe_fd)
        _send(ctl, {"id": request["id"], "forked": None})
        return
    led_r, led_w = os.pipe()  # EOF once the guard leads its group: only then is its pid a pgid
    pid = os.fork()
    if pid == 0:
        ctl.close()
        os.close(led_r)
        _guard(request, pipe_fd, led_w, api_module, server_env, mode)
    os.close(pipe_fd)
    os.close(led_w)
    os.read(led_r, 1)
    os.close(led_r)
    guards.add(pid)
    _send(ctl, {"id": request["id"], "forked": pid})


def boot(args: list[str]) -> None:
    """Exec this interpreter again with vLLM's LD_PRELOAD (`vllm_ld_preload`), recording the
    LD_PRELOAD the trial's environment had, to be put back before anything is imported."""
    current = os.environ.get("LD_PRELOAD")
    env = dict(os.environ, LD_PRELOAD=entry.vllm_ld_preload(current or ""))
    code = sys.orig_argv[sys.orig_argv.index("-c") + 1]  # the tuner's ZYGOTE_ENTRY, run again
    argv = ["serve", *args, json.dumps(current)]
    os.execve(sys.executable, [sys.executable, "-c", code, *argv], env)


def main(argv: list[str]) -> None:
    """argv: PHASE CTL_FD TUNER_PID API_MODULE MODE PRELOAD_JSON [LD_PRELOAD_JSON]: PRELOAD_JSON is
    [required modules, GPU modules probed first]. TUNER_PID is the tuner that started it: the
    zygote serves it only, and a later tuner finds a zygote whose tuner is gone by it
    (`serving/process/zygote.py`, `kill_orphans`)."""
    phase, ctl_fd, tuner, api_module, mode = argv[0], int(argv[1]), int(argv[2]), argv[3], argv[4]
    preload = json.loads(argv[5])
    if phase == "boot" and mode == FORKSERVER:
        boot(argv[1:6])
    try:  # before the environment changes: setproctitle finds its memory from the original one
        import setproctitle

        setproctitle.getproctitle()
    except ImportError:
        pass
    server_env = dict(os.environ)  # the forkserver's, as `entry.install` records it: what was loaded at exec
    if mode == FORKSERVER:
        original = json.loads(argv[6])
        if original is None:
            del os.environ["LD_PRELOAD"]
        else:
            os.environ["LD_PRELOAD"] = original
    required, probed = preload
    for name in (*required, api_module):
        importlib.import_module(name)
    if cuda_context():
        print(f"autotune zygote: a CUDA context exists after importing {', '.join(required)}; refusing to serve")
        sys.stdout.flush()
        os._exit(REFUSED)
    if mode == FORK and (why := fork_cannot_use_cuda()):
        print(f"autotune zygote: {why} after importing {', '.join(required)}; refusing to serve", flush=True)
        os._exit(REFUSED)
    why = probe(probed)
    if why is None:
        for name in probed:
            importlib.import_module(name)
    else:
        print(f"autotune zygote: {why}: left to each server", flush=True)
    with socket.socket(fileno=ctl_fd) as ctl:
        serve(ctl, api_module, server_env, mode, tuner)
    # Nothing to clean up (each server has its own guard); an interpreter's exit with torch and
    # vLLM loaded takes seconds, in which this would look like a server left behind.
    sys.stdout.flush()
    os._exit(0)
