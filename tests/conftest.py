import os
import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def launch_ctx():
    """Installed vLLM, this machine, the default model (built once, cached)."""
    from search.context import launch_context

    return launch_context()


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    """Kept after the run (CI uploads it): server logs, screenshots, reports."""
    d = Path(os.environ.get("AUTOTUNE_TEST_ARTIFACTS", Path(__file__).parent.parent / "test-artifacts"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def quick_server_values(ctx, **overrides):
    """A fast-starting server on the default model: eager, small KV cache."""
    values = {"dtype": ctx.dtype, "enforce_eager": True, "max_model_len": 2048,
              "memory_utilization": 0.25}
    values.update(overrides)
    return {k: v for k, v in values.items() if v is not None}
