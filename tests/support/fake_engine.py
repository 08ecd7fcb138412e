"""A stand-in for vLLM's EngineCore and its CPU worker, as a module's source: the integration tests
of the server's entry and of the zygote write it beside a stand-in API server and record, from
each process it starts, how it was started (forked or spawned, what it inherited)."""

FAKE_ENGINE = """
import json, multiprocessing, os

def _record(log, **kw):
    with open(log, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), **kw}) + "\\n")

MARK = "fresh interpreter"

def _preloaded(pid):  # what the process was exec'd with: a fork cannot load libraries after the fact
    env = open(f"/proc/{pid}/environ", "rb").read().split(b"\\0")
    return next((v.decode()[len("LD_PRELOAD="):] for v in env if v.startswith(b"LD_PRELOAD=")), "")

def worker(log):
    import torch
    _record(log, who="worker", late=os.environ.get("SET_BY_THE_API_SERVER"), mark=MARK,
            exec_preload=_preloaded(os.getppid()), cpus=sorted(os.sched_getaffinity(0)),
            threads=torch.get_num_threads())

def engine_core(log):
    global MARK
    MARK = "the engine's memory"  # a forked worker has it; a spawned one imports this module afresh
    _record(log, who="engine", late=os.environ.get("SET_BY_THE_API_SERVER"))
    p = multiprocessing.get_context("spawn").Process(target=worker, args=(log,))  # as vLLM on a CPU
    os.environ.update(OMP_NUM_THREADS="1", GOMP_CPU_AFFINITY=os.environ.get("FAKE_GOMP", "0"))  # as vLLM's OMPProcessManager
    p.start()
    p.join()
"""
