"""`--storage ""`: refused in one line before anything starts, by every command that takes it
(an empty URL is more likely an unset variable than a wish for the default SQLite file)."""

from __future__ import annotations

import pytest

from tests.support.cli import autotune_forked
from tests.support.study_loop import LOOP_SCENARIO

EMPTY = (
    "autotune: error: --storage is empty (an unset variable?); pass a database URL: the one `make db` "
    "prints, or sqlite:///PATH/autotune.db"
)


@pytest.mark.parametrize(
    "command",
    [
        ["search", LOOP_SCENARIO],
        ["search", LOOP_SCENARIO, "--workers", "2"],
        ["export", LOOP_SCENARIO],
        ["dashboard", LOOP_SCENARIO],
        ["worker", "--study", "loop"],
    ],
    ids=["search", "search-workers", "export", "dashboard", "worker"],
)
def test_an_empty_storage_is_refused_and_starts_nothing(tmp_path, command):
    runs = tmp_path / "runs"
    proc = autotune_forked(*command, "--storage", "", "--runs-dir", runs, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == EMPTY
    assert not runs.exists()  # no default database, no study directory
