"""tests/unit is a place: tests that run in this process and need no vLLM, network, browser,
PostgreSQL, subprocess or `make` (`make test-fast` runs them). Anything else is an integration
test (tests/integration, docs/architecture.md "Tests"): `in_process_only` makes a unit test that
starts a process or opens a TCP/UDP socket fail, naming where it belongs."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine
from threadpoolctl import threadpool_limits

INTEGRATION_MARKERS = ("vllm", "browser", "postgres")
WHERE = "tests/integration (a unit test runs in-process: docs/architecture.md, Tests)"


def _refused(what: str):
    def refuse(*args, **kwargs):
        raise AssertionError(f"{what} from a unit test: fake it, or move the test to {WHERE}")

    return refuse


def _inet_only(method, what: str):
    """`method` for Unix sockets (asyncio's own self-pipe), refused for TCP and UDP ones."""

    def guarded(sock, *args, **kwargs):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            raise AssertionError(f"{what} from a unit test: fake it, or move the test to {WHERE}")
        return method(sock, *args, **kwargs)

    return guarded


@pytest.fixture(autouse=True)
def in_process_only(request, monkeypatch):
    for marker in INTEGRATION_MARKERS:
        if request.node.get_closest_marker(marker) is not None:
            pytest.fail(f"a test marked {marker} belongs in {WHERE}", pytrace=False)
    monkeypatch.setattr(subprocess.Popen, "__init__", _refused("a subprocess"))
    monkeypatch.setattr(os, "fork", _refused("a fork"))
    monkeypatch.setattr(os, "posix_spawn", _refused("a spawned process"))
    for name in ("bind", "connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, _inet_only(getattr(socket.socket, name), f"a socket {name}"))


def _no_fsync(dbapi_connection, _record) -> None:
    if isinstance(dbapi_connection, sqlite3.Connection):
        dbapi_connection.execute("PRAGMA synchronous=OFF")
        dbapi_connection.execute("PRAGMA journal_mode=MEMORY")


@pytest.fixture(autouse=True)
def sqlite_without_fsync():
    """A unit test's study database lives in tmp_path and dies with it: SQLite need not wait for the
    disk at each commit (on a busy disk a study loop test spent half its time in fsync)."""
    event.listen(Engine, "connect", _no_fsync)
    yield
    event.remove(Engine, "connect", _no_fsync)


@pytest.fixture(scope="session", autouse=True)
def one_thread_numerics():
    """The numerical libraries' thread pools (the GP sampler's torch, numpy's OpenBLAS) on one thread:
    on a busy machine their threads spin, and the GP tests took three times the CPU (82 s, not 26)."""
    try:
        import torch
    except ImportError:  # no GP sampler here: numpy's pools alone
        torch = None
    before = torch.get_num_threads() if torch else 0
    if torch:
        torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1):
            yield
    finally:
        if torch:
            torch.set_num_threads(before)
