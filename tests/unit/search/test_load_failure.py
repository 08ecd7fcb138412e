"""A load run that fails while its server shuts down is the server's failure, not the client's."""

from __future__ import annotations

from types import SimpleNamespace

from search.executor import load_failure
from serving import Failure, FailureClass


class ShuttingDown:
    """A server whose engine was killed: it exits `after` polls (the API server's shutdown)."""

    def __init__(self, after: int):
        self.after, self.polls = after, 0
        self.spec = SimpleNamespace(log_path="server.log")

    def poll_failure(self, phase: str) -> Failure | None:
        self.polls += 1
        if self.polls <= self.after:
            return None
        return Failure(FailureClass.KILLED, "EngineDeadError: the engine process was killed by SIGKILL", phase=phase)


def test_a_refused_connection_while_the_server_shuts_down_is_its_death():
    # vLLM 0.26 on an H100, EngineCore SIGKILLed mid-load: the client's next connection was refused
    # about a second before the API server's process exited.
    refused = ConnectionRefusedError("Cannot connect to host 127.0.0.1:34361")
    failure = load_failure(refused, ShuttingDown(after=3), grace_s=5.0)
    assert failure.cls == FailureClass.KILLED and failure.phase == "load"


def test_a_load_error_on_a_live_server_is_the_load_generators_after_the_grace():
    server = ShuttingDown(after=10**6)
    failure = load_failure(ValueError("bad workload"), server, grace_s=0.5)
    assert failure.cls == FailureClass.LOAD_ERROR and failure.line == "ValueError: bad workload"
    assert server.polls >= 2
