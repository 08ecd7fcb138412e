"""The server's entry: its spawned children (vLLM's EngineCore, the CPU worker) must not re-run the
API server module, as multiprocessing's spawn does for a `python -m` main module. Checked with a
stand-in module that spawns a child the way vLLM does and records which processes ran it."""

import subprocess
import sys

from search.serving import resolve_server_args
from search.serving.process import command_line
from search.serving.process.server import LaunchSpec
from tests.support import fakes

STAND_IN = '''
import multiprocessing, os, sys, time
with open(os.environ["RAN_LOG"], "a") as f:
    f.write(f"{os.getpid()} {__name__}\\n")

if __name__ == "__main__":
    assert "--port" in sys.argv  # the flags reach the module as they do with -m
    # vLLM's process targets live in its modules (EngineCoreProc.run_engine_core), not in __main__
    p = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0,))
    p.start()
    p.join()
    sys.exit(p.exitcode)
'''


def run(tmp_path, lean: bool) -> list[str]:
    (tmp_path / "fake_api_server.py").write_text(STAND_IN)
    log = tmp_path / f"ran-{lean}.log"
    spec = LaunchSpec(model=None, args=[], log_path=tmp_path / "server.log", python=sys.executable,
                      warm_children=False)
    cmd = spec.command(port=1234, lean=lean)
    cmd = [part.replace("vllm.entrypoints.openai.api_server", "fake_api_server") for part in cmd]
    done = subprocess.run(cmd, cwd=tmp_path, env={"RAN_LOG": str(log), "PYTHONPATH": str(tmp_path)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [line.split()[1] for line in log.read_text().splitlines()]


def test_with_the_lean_entry_only_the_api_server_process_runs_the_module(tmp_path):
    assert run(tmp_path, lean=True) == ["__main__"]


def test_with_python_dash_m_every_spawned_child_re_runs_it(tmp_path):
    """What the lean entry saves: the old start's children ran the module too."""
    assert run(tmp_path, lean=False) == ["__main__", "__mp_main__"]


def test_the_lean_entry_is_the_default_and_the_users_command_stays_python_dash_m():
    spec = LaunchSpec(model=None, args=[], log_path=None)
    assert spec.command(port=1)[1] == "-c"
    ctx = fakes.ctx()
    user = command_line(ctx, resolve_server_args({}, ctx, where="t"))
    assert user.startswith("python -m vllm.entrypoints.openai.api_server --model ")


FAKE_ENGINE = '''
import json, multiprocessing, os

def _record(log, **kw):
    with open(log, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), **kw}) + "\\n")

MARK = "fresh interpreter"

def worker(log):
    _record(log, who="worker", late=os.environ.get("SET_BY_THE_API_SERVER"), mark=MARK)

def engine_core(log):
    global MARK
    MARK = "the engine's memory"  # a forked worker has it; a spawned one imports this module afresh
    _record(log, who="engine", late=os.environ.get("SET_BY_THE_API_SERVER"))
    p = multiprocessing.get_context("spawn").Process(target=worker, args=(log,))  # as vLLM on a CPU
    p.start()
    p.join()
'''

FAKE_API_SERVER = '''
import json, multiprocessing, os, fake_engine
os.environ["SET_BY_THE_API_SERVER"] = "yes"  # as vLLM sets variables for its children just before
with open(os.environ["RAN_LOG"], "a") as f:
    f.write(json.dumps({"pid": os.getpid(), "who": "api"}) + "\\n")
p = multiprocessing.get_context("spawn").Process(target=fake_engine.engine_core, args=(os.environ["RAN_LOG"],))
p.start()
p.join()
'''


def test_the_warm_entry_forks_the_engine_from_a_forkserver_and_the_engine_spawns_its_worker(tmp_path):
    """The default start: the API server's `spawn` becomes a fork from an interpreter that has
    imported vLLM already (the forkserver), which still sees the environment its parent set just
    before starting it; the EngineCore spawns its worker as vLLM does (a worker forked from it
    inherited its OpenMP state and served worse)."""
    import json
    (tmp_path / "fake_engine.py").write_text(FAKE_ENGINE)
    (tmp_path / "fake_api_server.py").write_text(FAKE_API_SERVER)
    log = tmp_path / "ran.log"
    spec = LaunchSpec(model=None, args=[], log_path=tmp_path / "server.log", python=sys.executable)
    assert spec.warm_children and "autotune_vllm_entry" in spec.command(port=1)[2]
    assert "autotune_vllm_entry" not in LaunchSpec(model=None, args=[], log_path=None, gpu=True).command(port=1)[2]
    cmd = [part.replace("vllm.entrypoints.openai.api_server", "fake_api_server") for part in spec.command(port=1)]
    done = subprocess.run(cmd, cwd=tmp_path, env={"RAN_LOG": str(log), "PYTHONPATH": str(tmp_path)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    ran = {r["who"]: r for r in map(json.loads, log.read_text().splitlines())}
    assert ran["engine"]["ppid"] != ran["api"]["pid"]  # forked by the forkserver, not spawned by the API server
    assert ran["worker"]["ppid"] == ran["engine"]["pid"] and ran["worker"]["mark"] == "fresh interpreter"
    assert ran["engine"]["late"] == ran["worker"]["late"] == "yes"
