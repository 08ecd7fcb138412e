"""prepare reads an existing study's stored scenario before anything starts; reading it creates
nothing and works on a database an older version began."""

import sqlite3

from search.prepare import stored_scenario_source
from tests.support.scripted_executor import ScriptedExecutor
from tests.support.study_loop import LOOP_SCENARIO, runner


def test_no_study_no_source_and_nothing_created(tmp_path):
    missing = tmp_path / "none.db"
    assert stored_scenario_source(f"sqlite:///{missing}", "loop") is None
    assert not missing.exists()
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()  # a database without our tables
    assert stored_scenario_source(f"sqlite:///{empty}", "loop") is None
    with sqlite3.connect(empty) as conn:
        assert conn.execute("SELECT name FROM sqlite_master").fetchall() == []
    conn.close()


def test_the_stored_source_is_read_from_a_database_without_the_newer_columns(tmp_path):
    runner(tmp_path, ScriptedExecutor(), trials=2).open()
    db = tmp_path / "loop.db"
    with sqlite3.connect(db) as conn:  # as a study begun before the CPU KV budget was stored
        conn.execute("ALTER TABLE autotune_studies DROP COLUMN cpu_kv_budget_bytes")
    conn.close()
    assert stored_scenario_source(f"sqlite:///{db}", "loop") == LOOP_SCENARIO.read_text()
    assert stored_scenario_source(f"sqlite:///{db}", "other") is None
