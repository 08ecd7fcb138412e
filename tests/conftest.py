import os
import signal
from pathlib import Path

import pytest

from tests.support.cli import autotune_forked
from tests.support.paths import E2E_SCENARIO, REPO


@pytest.fixture(scope="session", autouse=True)
def python_sigint_handler():
    """A shell without job control starts a background job with SIGINT ignored, and Python then
    installs no KeyboardInterrupt handler: give the suite the handler an interactive run has, so
    the interrupt tests test the tuner, not how the suite was started."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield


@pytest.fixture(scope="session")
def launch_ctx():
    """Installed vLLM, this machine, the default model (built once, cached)."""
    from serving.context import launch_context

    return launch_context()


@pytest.fixture(scope="session")
def tok_dir(tmp_path_factory) -> Path:
    """A tiny locally trained tokenizer (no model): for workload and load-generator tests."""
    from tests.support.tiny_tokenizer import build_tiny_tokenizer

    return build_tiny_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="session")
def tok(tok_dir):
    from loadgen.tokenizer import PromptTokenizer

    return PromptTokenizer.load(tok_dir)


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    """Kept after the run (CI uploads it): server logs, screenshots, reports."""
    d = Path(os.environ.get("AUTOTUNE_TEST_ARTIFACTS", REPO / "test-artifacts"))
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="session")
def finished_study(tmp_path_factory, artifacts_dir):
    """One small real study per test session (2 vLLM starts on the CPU default model: vllm_defaults
    and one sampled trial; then 4 more in its confirmation phase).

    Returns dict(storage=URL, study=name, runs_dir=Path, run_dir=Path, stdout=str).
    """
    runs = tmp_path_factory.mktemp("finished-study")
    storage = f"sqlite:///{runs / 'study.db'}"
    proc = autotune_forked(
        "search", E2E_SCENARIO, "--trials", 2, "--storage", storage, "--runs-dir", runs, timeout=1200
    )
    (artifacts_dir / "finished_study.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"storage": storage, "study": "e2e", "runs_dir": runs, "run_dir": runs / "e2e", "stdout": proc.stdout}


@pytest.fixture(scope="session")
def postgres_server():
    """One real PostgreSQL for the session (`make db`'s own): (LocalPostgres, URL)."""
    from tests.support.postgres import running_postgres

    with running_postgres() as started:
        yield started


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """A fresh, empty database on the session's PostgreSQL."""
    from tests.support.postgres import fresh_database

    return fresh_database(postgres_server[1])
