"""The server's entry: its spawned children (vLLM's EngineCore, the CPU worker) must not re-run the
API server module, as multiprocessing's spawn does for a `python -m` main module. Checked with a
stand-in module that spawns a child the way vLLM does and records which processes ran it."""

import json
import re
import subprocess
import sys

import pytest

from serving.process.server import LaunchSpec
from tests.support.fake_engine import FAKE_ENGINE

STAND_IN = """
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
"""


def run_stand_in(tmp_path, cmd: list[str], log, **env) -> str:
    """`cmd` (a LaunchSpec's command) with `fake_api_server` for vLLM's API server module; its stderr."""
    cmd = [part.replace("vllm.entrypoints.openai.api_server", "fake_api_server") for part in cmd]
    done = subprocess.run(
        cmd,
        cwd=tmp_path,
        env={"RAN_LOG": str(log), "PYTHONPATH": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def run(tmp_path, lean: bool) -> list[str]:
    (tmp_path / "fake_api_server.py").write_text(STAND_IN)
    log = tmp_path / f"ran-{lean}.log"
    spec = LaunchSpec(model=None, args=[], log_path=tmp_path / "server.log", python=sys.executable, warm_children=False)
    run_stand_in(tmp_path, spec.command(port=1234, lean=lean), log)
    return [line.split()[1] for line in log.read_text().splitlines()]


def test_with_the_lean_entry_only_the_api_server_process_runs_the_module(tmp_path):
    assert run(tmp_path, lean=True) == ["__main__"]


def test_with_python_dash_m_every_spawned_child_re_runs_it(tmp_path):
    """What the lean entry saves: the old start's children ran the module too."""
    assert run(tmp_path, lean=False) == ["__main__", "__mp_main__"]


# One API server starts an EngineCore (which starts its worker) for each case in turn, with that
# case's environment set just before, as vLLM sets variables for its children: the entry starts
# one forkserver, which imports vLLM once for all three.
FAKE_API_SERVER = """
import json, multiprocessing, os, sys, fake_engine, autotune_vllm_entry
os.environ["SET_BY_THE_API_SERVER"] = "yes"  # as vLLM sets variables for its children just before
for name, case in json.loads(os.environ["WARM_CASES"]):
    os.environ["LD_PRELOAD"] = case.get("LD_PRELOAD") or autotune_vllm_entry.vllm_ld_preload("")  # as vLLM's CPU platform
    os.environ.pop("FAKE_GOMP", None)
    os.environ.update({k: v for k, v in case.items() if k != "LD_PRELOAD"})
    log = os.path.join(os.environ["RAN_DIR"], name + ".log")
    print(f"case {name}", file=sys.stderr, flush=True)
    with open(log, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "who": "api", "preload": os.environ["LD_PRELOAD"]}) + "\\n")
    p = multiprocessing.get_context("spawn").Process(target=fake_engine.engine_core, args=(log,))
    p.start()
    p.join()
    assert p.exitcode == 0, (name, p.exitcode)
"""
# name: what differs from the default start in the API server's environment when it starts the
# EngineCore (FAKE_GOMP: the GOMP_CPU_AFFINITY the EngineCore gives its worker).
WARM_CASES = {
    "default": {},
    "other preload": {"LD_PRELOAD": "/nonexistent/libother.so"},
    "several cpus": {"FAKE_GOMP": "0 1"},
}


@pytest.fixture(scope="module")
def warm_cases(tmp_path_factory) -> dict[str, tuple[dict, str]]:
    """The warm entry through WARM_CASES, one after another in one API server: for each case, what
    each of its processes recorded (by who it was) and what the server said on stderr meanwhile."""
    work = tmp_path_factory.mktemp("warm")
    (work / "fake_engine.py").write_text(FAKE_ENGINE)
    (work / "fake_api_server.py").write_text(FAKE_API_SERVER)
    spec = LaunchSpec(model=None, args=[], log_path=work / "server.log", python=sys.executable)
    cases = json.dumps(list(WARM_CASES.items()))
    stderr = run_stand_in(work, spec.command(port=1), work / "ran.log", WARM_CASES=cases, RAN_DIR=str(work))
    said = dict(re.findall(r"^case (.+?)\n(.*?)(?=^case |\Z)", stderr, flags=re.M | re.S))
    assert said.keys() == WARM_CASES.keys(), stderr
    return {
        name: ({r["who"]: r for r in map(json.loads, (work / f"{name}.log").read_text().splitlines())}, said[name])
        for name in WARM_CASES
    }


def test_the_warm_entry_forks_the_engine_and_its_worker_from_a_forkserver(tmp_path, warm_cases):
    """The default start: the API server's `spawn`, and the EngineCore's, become forks from an
    interpreter that has imported vLLM already (the forkserver); each child still sees the
    environment its parent set just before starting it, and the forkserver was exec'd with the
    libraries vLLM preloads into a spawned child. The worker is forked from the forkserver, which
    has run nothing, never from the EngineCore, which has run torch."""
    spec = LaunchSpec(model=None, args=[], log_path=tmp_path / "server.log", python=sys.executable)
    assert spec.warm_children and "autotune_vllm_entry" in spec.command(port=1)[2]
    gpu = LaunchSpec(model=None, args=[], log_path=None, gpu=True).command(port=1)[2]
    assert "forkserver=False" in gpu  # on a GPU the entry starts no forkserver: vLLM forks the EngineCore
    ran, _ = warm_cases["default"]
    assert ran["engine"]["ppid"] != ran["api"]["pid"]  # forked by the forkserver, not spawned by the API server
    assert ran["worker"]["ppid"] == ran["engine"]["ppid"]  # the forkserver's child too
    assert ran["worker"]["mark"] == "fresh interpreter"  # not a copy of the engine's memory
    assert ran["engine"]["late"] == ran["worker"]["late"] == "yes"
    assert (
        ran["worker"]["exec_preload"] == ran["api"]["preload"] != ""
    )  # the libraries vLLM preloads for a spawned child
    assert ran["worker"]["cpus"] == [0] and ran["worker"]["threads"] == 1  # as libgomp reads them when it loads


def test_a_child_whose_ld_preload_differs_from_the_forkservers_is_spawned(warm_cases):
    """Forked, it would run without the libraries its parent asked for (vLLM's libgomp,
    tcmalloc); spawned, it loads them, and the server log says why."""
    ran, stderr = warm_cases["other preload"]
    assert ran["engine"]["ppid"] == ran["api"]["pid"] and ran["worker"]["ppid"] == ran["engine"]["pid"]
    assert "is not the forkserver's" in stderr and "this child is spawned" in stderr


def test_a_worker_bound_to_several_cpus_is_spawned(warm_cases):
    """libgomp binds thread i to the i-th CPU of GOMP_CPU_AFFINITY when it loads; a forked child
    cannot have that (one CPU it can: the whole process is bound to it), so it is spawned."""
    ran, stderr = warm_cases["several cpus"]
    assert ran["engine"]["ppid"] != ran["api"]["pid"]  # the engine is still forked
    assert ran["worker"]["ppid"] == ran["engine"]["pid"]  # the worker spawned by it
    assert ran["worker"]["threads"] == 1  # libgomp read its settings when the spawned worker loaded it
    assert "GOMP_CPU_AFFINITY='0 1' is not the forkserver's None: this child is spawned" in stderr
