"""A vLLM server without vLLM, for the executor's and the calibration's unit tests: it starts at
once and, when told to, dies after some polls."""

from dataclasses import dataclass, field, replace
from pathlib import Path

from serving import Failure, FailureClass

OOM = Failure(FailureClass.OOM, "killed by SIGKILL without an error message (the kernel's OOM killer?)", returncode=-9)


@dataclass
class FakeServer:
    """Starts at once; `dies_after_polls`: poll_failure reports OOM from that poll on (None: never)."""

    log_path: Path
    dies_after_polls: int | None = None
    polls: int = 0
    ready_s: float | None = None
    zygote_failure: str | None = None
    stopped: bool = False
    base_url: str = "http://127.0.0.1:9"
    spec: object = field(init=False)

    def __post_init__(self):
        self.spec = type("Spec", (), {"log_path": self.log_path})()

    def start(self):
        self.ready_s = 0.1

    def poll_failure(self, phase):
        self.polls += 1
        if self.dies_after_polls is not None and self.polls > self.dies_after_polls:
            return replace(OOM, phase=phase, log_path=str(self.log_path))
        return None

    def stop(self, kill: bool = False):
        self.stopped = True
        self.killed = kill

    def healthy(self, timeout: float = 2.0) -> bool:
        return False

    def processes_stopped(self) -> bool:
        return False

    def elapsed(self) -> float:
        return 0.0

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
