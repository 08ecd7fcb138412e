"""The study's zygote: servers forked from one interpreter that imported the API server once,
each one the server WARM_ENTRY would have exec'd (its argv, environment, log, priority, process
group, forkserver and exit code), none outliving the tuner. Checked through the real VllmServer
and zygote, with a stand-in API server module (it answers /health, and starts an EngineCore the
way vLLM does) for vLLM's."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from serving.process import server as server_mod
from serving.process import zygote, zygote_pool
from serving.process.process_group import group_members
from serving.process.server import LaunchSpec, VllmServer
from tests.support.fake_engine import FAKE_ENGINE

FAKE_API_SERVER = """
import http.server, json, multiprocessing, os, sys
import fake_engine

def record(**kw):
    with open(os.environ["RAN_LOG"], "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), **kw}) + "\\n")

record(who="module", name=__name__)  # once per interpreter that imports it

if __name__ == "__main__":
    record(who="api", argv=sys.argv, pgid=os.getpgid(0), sid=os.getsid(0), nice=os.nice(0),
           cwd=os.getcwd(), marker=os.environ.get("ZYGOTE_TEST_MARKER"), preload=os.environ.get("LD_PRELOAD"))
    os.environ["SET_BY_THE_API_SERVER"] = "yes"  # as vLLM sets variables for its children just before
    import autotune_vllm_entry
    os.environ["LD_PRELOAD"] = autotune_vllm_entry.vllm_ld_preload("")  # as vLLM's CPU platform
    p = multiprocessing.get_context("spawn").Process(target=fake_engine.engine_core, args=(os.environ["RAN_LOG"],))
    p.start()
    p.join()
    print("engine done", flush=True)
    if "--exit" in sys.argv:
        sys.exit(int(sys.argv[sys.argv.index("--exit") + 1]))

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

    port = int(sys.argv[sys.argv.index("--port") + 1])
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    work = tmp_path_factory.mktemp("zygote")
    (work / "fake_engine.py").write_text(FAKE_ENGINE)
    (work / "fake_api_server.py").write_text(FAKE_API_SERVER)
    return work


def spec(work, name: str, *args: str) -> LaunchSpec:
    return LaunchSpec(
        model=None,
        args=list(args),
        log_path=work / name / "server.log",
        python=sys.executable,
        env={"PYTHONPATH": str(work), "RAN_LOG": str(work / "ran.log"), "ZYGOTE_TEST_MARKER": "m"},
        startup_timeout_s=120,
        api_module="fake_api_server",
    )


@pytest.fixture(scope="module")
def two_servers(stand_in):
    """Two servers in a row, each stopped; then a third that exits by itself with code 3."""
    mp = pytest.MonkeyPatch()
    try:
        seen = []
        for name in ("first", "second"):
            server = VllmServer(spec(stand_in, name, "--flag", "x"))
            server.start()
            seen.append(
                {
                    "pgid": server.pgid,
                    "port": server.port,
                    "proc": server.proc,
                    "zygote": psutil.Process(server.pgid).ppid(),
                    "members": len(group_members(server.pgid)),
                }
            )
            report = server.stop()
            seen[-1].update(stop=report, left=group_members(seen[-1]["pgid"]))
        exiting = VllmServer(spec(stand_in, "third", "--exit", "3"))
        with pytest.raises(server_mod.ServerFailed) as failed:
            exiting.start()
        ran = [json.loads(line) for line in (stand_in / "ran.log").read_text().splitlines()]
        yield {"seen": seen, "ran": ran, "failed": failed.value.failure, "work": stand_in}
    finally:
        mp.undo()
        zygote_pool.close()


def test_the_api_server_module_is_imported_once_and_run_as_main_in_each_server(two_servers):
    ran, seen = two_servers["ran"], two_servers["seen"]
    imported = [r for r in ran if r["who"] == "module" and r["name"] == "fake_api_server"]
    mains = [r for r in ran if r["who"] == "module" and r["name"] == "__main__"]
    assert len(imported) == 1 and imported[0]["pid"] == seen[0]["zygote"] == seen[1]["zygote"]
    assert len(mains) == 3 and len({r["pid"] for r in mains}) == 3
    assert all(isinstance(s["proc"], zygote.ForkedServer) for s in seen)


def test_each_server_gets_its_argv_environment_cwd_priority_and_own_process_group(two_servers):
    apis = [r for r in two_servers["ran"] if r["who"] == "api"]
    for api, seen in zip(apis, two_servers["seen"]):
        assert api["argv"] == ["-c", "--host", "127.0.0.1", "--port", str(seen["port"]), "--flag", "x"]
        assert api["pgid"] == api["sid"] == seen["pgid"] == api["ppid"]  # the guard leads a new session
        assert api["nice"] == os.nice(0) + server_mod.server_nice()
        assert api["cwd"] == os.getcwd() and api["marker"] == "m"
        assert api["preload"] is None  # vLLM's LD_PRELOAD is loaded, not left in the environment
        assert seen["members"] >= 2 and seen["left"] == [] and not seen["stop"].killed
    work = two_servers["work"]
    log = (work / "first" / "server.log").read_text()
    assert "forked by the study's zygote" in log and "engine done" in log
    # the zygote logs beside the server that started it, and every server it forks says where
    zygote_log = work / "first" / "zygote.log"
    assert zygote_log.exists() and not (work / "zygote.log").exists()
    assert f"the zygote's log: {zygote_log}" in (work / "second" / "server.log").read_text()


def by_server(ran: list[dict]) -> list[dict]:
    """Each API server's record with its engine's and worker's (the log is written in order)."""
    servers = []
    for r in ran:
        if r["who"] == "api":
            servers.append({"api": r})
        elif r["who"] in ("engine", "worker"):
            servers[-1][r["who"]] = r
    return servers


def test_the_engine_and_its_worker_are_forked_from_the_servers_forkserver(two_servers):
    servers = by_server(two_servers["ran"])
    assert len(servers) == 3
    for s in servers:
        assert s["engine"]["ppid"] != s["api"]["pid"]  # the forkserver's child, not spawned by the API server
        assert s["worker"]["ppid"] == s["engine"]["ppid"]  # the forkserver's too, not the engine's
        assert s["engine"]["late"] == s["worker"]["late"] == "yes"
        assert s["worker"]["mark"] == "fresh interpreter"  # not a copy of the engine
        assert s["worker"]["cpus"] == [0] and s["worker"]["threads"] == 1
    assert "this child is spawned" not in (two_servers["work"] / "first" / "server.log").read_text()


def test_a_server_that_exits_is_seen_with_its_exit_code(two_servers):
    failure = two_servers["failed"]
    assert failure.returncode == 3
    assert "engine done" in (two_servers["work"] / "third" / "server.log").read_text()


def test_a_zygote_that_cannot_start_leaves_the_server_to_be_execd(tmp_path):
    """A `python` that is not one (a stand-in that prints a line and exits) cannot run the
    zygote: the server is exec'd as before, and its log says why."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'RuntimeError: not a python'\nexit 1\n")
    fake.chmod(0o755)
    server = VllmServer(
        LaunchSpec(model=None, args=[], log_path=tmp_path / "t" / "server.log", python=str(fake), startup_timeout_s=20)
    )
    with pytest.raises(server_mod.ServerFailed):
        server.start()
    log = (tmp_path / "t" / "server.log").read_text()
    assert "not forked: the study's zygote is gone" in log and "this server is exec'd" in log
    assert "RuntimeError: not a python" in log.split("this server is exec'd")[1]


def test_a_python_that_does_not_exist_fails_the_start_not_the_tuner(tmp_path):
    server = VllmServer(
        LaunchSpec(
            model=None,
            args=[],
            log_path=tmp_path / "t" / "server.log",
            python=str(tmp_path / "no-python"),
            startup_timeout_s=20,
        )
    )
    with pytest.raises(server_mod.ServerFailed):
        server.start()
    assert "the study's zygote did not start (FileNotFoundError" in (tmp_path / "t" / "server.log").read_text()


TUNER = """
import sys, time
from pathlib import Path
from serving.process import server as server_mod
from serving.process.server import LaunchSpec, VllmServer
work = Path(sys.argv[1])
s = VllmServer(LaunchSpec(model=None, args=[], log_path=work / "orphan" / "server.log", python=sys.executable,
                          env={"PYTHONPATH": str(work), "RAN_LOG": str(work / "orphan.log")}, startup_timeout_s=120,
                          api_module="fake_api_server"))
s.start()
print(s.pgid, s.port, flush=True)
time.sleep(600)
"""


def test_sigkill_of_the_tuner_takes_the_zygote_and_its_servers_down(stand_in):
    tuner = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(TUNER), str(stand_in)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.getcwd(),
    )
    try:
        pgid, _port = map(int, tuner.stdout.readline().split())
        zygote_pid = psutil.Process(pgid).ppid()
        assert "autotune_vllm_zygote" in " ".join(psutil.Process(zygote_pid).cmdline())
        assert group_members(pgid)
        os.kill(tuner.pid, signal.SIGKILL)
        tuner.wait()
        deadline = time.monotonic() + 30
        while (group_members(pgid) or psutil.pid_exists(zygote_pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert group_members(pgid) == []
        assert not psutil.pid_exists(zygote_pid) or psutil.Process(zygote_pid).status() == psutil.STATUS_ZOMBIE
    finally:
        if tuner.poll() is None:
            tuner.kill()
