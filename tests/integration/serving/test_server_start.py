"""A server start's port and log, without vLLM: the port is held for it until vLLM binds it;
each start writes and is classified from its own log (a fake `python` that prints one line and
exits stands in for vLLM, started through the real guard and process group)."""

import os
import socket
import stat

import pytest

from serving import FailureClass
from serving.process.process_group import reserve_port
from serving.process.server import LaunchSpec, ServerFailed, VllmServer


def fake_python(tmp_path, name: str, line: str, code: int = 1) -> str:
    script = tmp_path / name
    script.write_text(f"#!/bin/sh\necho '{line}'\nexit {code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def start(python: str, log_path) -> ServerFailed:
    server = VllmServer(LaunchSpec(model=None, args=[], log_path=log_path, python=python, startup_timeout_s=20))
    with pytest.raises(ServerFailed) as err:
        server.start()
    return err.value


def test_a_second_start_is_classified_from_its_own_lines_and_the_first_log_is_kept(tmp_path):
    log_path = tmp_path / "trial-0001" / "server.log"
    first = start(fake_python(tmp_path, "busy", "OSError: [Errno 98] Address already in use"), log_path)
    assert first.failure.cls is FailureClass.PORT_BUSY
    second = start(fake_python(tmp_path, "other", "RuntimeError: the second start has its own failure"), log_path)
    assert second.failure.cls is FailureClass.OTHER  # not port_busy, from the first start's lines
    assert second.failure.line == "RuntimeError: the second start has its own failure"
    assert "Address already in use" not in log_path.read_text()
    kept = log_path.with_name("server.1.log")
    assert "Address already in use" in kept.read_text()
    server_logs = [name for name in os.listdir(log_path.parent) if name.startswith("server")]
    assert sorted(server_logs) == ["server.1.log", "server.log"]  # beside them, the zygote's own log


def test_the_reserved_port_is_refused_to_others_and_left_to_vllms_own_bind():
    reservation = reserve_port()
    port = reservation.getsockname()[1]
    try:
        with socket.socket() as other, pytest.raises(OSError):  # another tuner, another program
            other.bind(("127.0.0.1", port))
        with socket.socket() as vllm:  # vllm.entrypoints.launchers.launcher.create_server_socket
            vllm.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            vllm.bind(("127.0.0.1", port))
            vllm.listen()
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                pass
    finally:
        reservation.close()


def test_the_server_runs_below_the_tuners_cpu_priority(tmp_path, monkeypatch):
    """A load client sharing the server's cores must not wait behind it: the server's session
    group (autogroup) and processes run at nice 10, the tuner's stay as they were."""
    script = tmp_path / "report"
    script.write_text('#!/bin/sh\necho "nice=$(nice) $(cat /proc/self/autogroup 2>/dev/null)"\nexit 1\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    log_path = tmp_path / "server.log"
    start(str(script), log_path)
    line = next(x for x in log_path.read_text().splitlines() if x.startswith("nice="))
    assert line.startswith(f"nice={os.nice(0) + 10}")
    if os.path.exists("/proc/self/autogroup"):
        assert line.endswith("nice 10")
    monkeypatch.setenv("AUTOTUNE_SERVER_NICE", "0")
    start(str(script), log_path)
    assert f"nice={os.nice(0)}" in log_path.read_text()
