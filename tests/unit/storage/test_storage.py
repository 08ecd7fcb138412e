"""Our tables in a real SQLite file through SQLAlchemy, beside Optuna's."""

import sqlite3
from datetime import datetime

import optuna
import pytest
from sqlalchemy import inspect
from sqlalchemy.orm import Session

from storage import database, queries
from storage.tables import (
    BUILD,
    FIRST_STAMPED_BUILD,
    SCHEMA_VERSION,
    ParetoMember,
    SchemaRecord,
    StudyRecord,
    TrialRecord,
)


def new_study(session, name="s"):
    rec = StudyRecord(
        study_name=name,
        scenario_name="mixed",
        scenario_source="name: mixed",
        scenario_digest="d",
        model_path="/m",
        vllm_version="vllm 0.32.0",
        hardware={"description": "cpu"},
        directions=["maximize"],
        objective_names=["goodput"],
    )
    session.add(rec)
    session.flush()
    return rec


def trial_fields(**kw):
    base = dict(
        status="ok",
        fingerprint="f1",
        params={"max_num_seqs": 8},
        config={},
        flags={},
        command="python -m vllm...",
        adjustments=[],
        metrics={"goodput": 1.5},
        server_diagnostics={},
        values=[1.5],
        constraints={"slo": -1.0},
        feasible=True,
        timings={},
        retried=[],
        diagnosis={"bottleneck": "healthy"},
        started_at=datetime(2026, 11, 22),
        finished_at=datetime(2026, 11, 22),
    )
    base.update(kw)
    return base


def trial(number, **kw) -> TrialRecord:
    return TrialRecord(trial_number=number, **trial_fields(**kw))


def test_tables_live_beside_optunas_in_one_sqlite_file(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.create_study(storage=url, study_name="s", directions=["maximize"])
    engine = database.open_db(url)
    tables = set(inspect(engine).get_table_names())
    assert {
        "autotune_studies",
        "autotune_trials",
        "autotune_pareto_snapshots",
        "autotune_pareto_members",
        "trials",
        "studies",
    } <= tables


def test_trials_upsert_and_earlier_runs_are_found_by_fingerprint(tmp_path):
    engine = database.open_db(f"sqlite:///{tmp_path / 'x.db'}")
    with Session(engine) as session:
        rec = new_study(session)
        queries.save_trial(session, rec, trial(0, status="failed", fingerprint="bad", failure_class="invalid_config"))
        queries.save_trial(session, rec, trial(1))
        queries.save_trial(session, rec, trial(1, metrics={"goodput": 2.0}))  # replaces
        session.commit()
    with Session(engine) as session:
        rec = queries.require_study(session, "s")
        rows = queries.trial_records(session, rec)
        assert [r.trial_number for r in rows] == [0, 1]
        assert rows[1].metrics == {"goodput": 2.0}
        assert queries.earlier_run_of(session, rec, "bad").failure_class == "invalid_config"
        assert queries.earlier_run_of(session, rec, "f1").trial_number == 1
        assert queries.earlier_run_of(session, rec, "nope") is None


def test_the_trials_whose_load_client_fell_behind_are_read_from_their_rows_of_their_study(tmp_path):
    engine = database.open_db(f"sqlite:///{tmp_path / 'x.db'}")
    with Session(engine) as session:
        rec, other = new_study(session), new_study(session, "other")
        queries.save_trial(session, rec, trial(0, client_behind=True))
        queries.save_trial(session, rec, trial(1))  # the column's default: on schedule
        queries.save_trial(session, rec, trial(2, client_behind=False))
        queries.save_trial(session, rec, trial(3, client_behind=True))
        queries.save_trial(session, other, trial(1, client_behind=True))
        session.commit()
        assert queries.clients_behind(session, rec) == {0, 3}
        assert queries.clients_behind(session, other) == {1}


def test_pareto_snapshots_keep_history(tmp_path):
    engine = database.open_db(f"sqlite:///{tmp_path / 'x.db'}")
    with Session(engine) as session:
        rec = new_study(session)
        for after, members, hv in [(0, [(0, [1.0])], 1.0), (1, [(1, [2.0])], 2.0), (2, [(1, [2.0]), (2, [2.0])], 2.5)]:
            queries.save_snapshot(
                session,
                rec,
                after,
                [ParetoMember(trial_number=n, values=v, params={}, config={}) for n, v in members],
                hypervolume=hv,
                n_finished=after + 1,
                n_feasible=after + 1,
            )
        queries.save_snapshot(
            session,
            rec,
            2,
            [ParetoMember(trial_number=2, values=[3.0], params={}, config={})],
            hypervolume=3.0,
            n_finished=3,
            n_feasible=3,
        )
        session.commit()
        history = queries.front_history(session, rec)
    assert [s.after_trial_number for s in history] == [0, 1, 2]
    assert [s.hypervolume for s in history] == [1.0, 2.0, 3.0]
    assert [m.trial_number for m in history[2].members] == [2]


def test_unknown_study_lists_the_ones_there(tmp_path):
    engine = database.open_db(f"sqlite:///{tmp_path / 'x.db'}")
    with Session(engine) as session:
        new_study(session, "mixed")
        try:
            queries.require_study(session, "chat")
        except LookupError as e:
            assert "studies here: mixed" in str(e)
        else:
            raise AssertionError("expected LookupError")


def test_the_failure_values_storage_recognises_are_the_failure_vocabularys():
    from serving import FailureClass, FailurePhase
    from storage.tables import LOAD_ERROR_CLASS, PRECHECK_PHASE, ZYGOTE_CLASS

    assert (FailurePhase.PRECHECK.value, FailureClass.LOAD_ERROR.value, FailureClass.ZYGOTE.value) == (
        PRECHECK_PHASE,
        LOAD_ERROR_CLASS,
        ZYGOTE_CLASS,
    )


@pytest.mark.parametrize(
    "fields, counts, reusable",
    [
        (dict(status="ok"), True, True),
        (dict(status="failed", failure_class="oom", failure_phase="startup"), True, True),
        (dict(status="failed", failure_class="oom", failure_phase="load"), True, True),
        (dict(status="failed", failure_class="invalid_config", failure_phase="precheck"), False, True),
        (dict(status="failed", failure_class="load_error", failure_phase="load"), True, False),
        (dict(status="failed", failure_class="zygote", failure_phase="startup"), True, False),
        (dict(status="duplicate"), False, False),
        (dict(status="duplicate", failure_class="invalid_config", failure_phase="precheck"), False, False),
    ],
)
def test_what_a_trial_costs_and_whether_it_may_stand_for_a_repeat(fields, counts, reusable):
    row = TrialRecord(**trial_fields(**fields))
    assert (row.counts_against_budget, row.reusable) == (counts, reusable)


def test_the_budget_spent_counts_server_starts_and_a_repeat_reuses_the_first_trial_that_judged_the_flags(tmp_path):
    engine = database.open_db(f"sqlite:///{tmp_path / 'x.db'}")
    with Session(engine) as session:
        rec = new_study(session)
        queries.save_trial(
            session, rec, trial(0, status="failed", failure_class="load_error", failure_phase="load", values=[0.0])
        )
        queries.save_trial(
            session,
            rec,
            trial(1, status="failed", fingerprint="bad", failure_class="invalid_config", failure_phase="precheck"),
        )
        queries.save_trial(session, rec, trial(2, log_path="/runs/trial-0002/server.log"))
        assert queries.earlier_run_of(session, rec, "f1").trial_number == 2  # not the load generator's failure
        repeat = TrialRecord(
            trial_number=3,
            status="duplicate",
            duplicate_of=2,
            fingerprint="f1",
            params={"max_num_seqs": 9},
            config={"max_num_seqs": 9},
            flags={},
            adjustments=[],
            timings={},
            retried=[],
            started_at=datetime(2026, 11, 23),
            finished_at=datetime(2026, 11, 23),
            diagnosis={"bottleneck": "healthy"},
        )
        queries.save_duplicate(session, rec, repeat, queries.earlier_run_of(session, rec, "f1"))
        session.commit()
        dup = queries.trial_records(session, rec)[3]
        assert (dup.status, dup.duplicate_of, dup.params, dup.diagnosis) == (
            "duplicate",
            2,
            {"max_num_seqs": 9},
            {"bottleneck": "healthy"},
        )
        assert {k: getattr(dup, k) for k in queries.REUSED_COLUMNS} == {
            k: getattr(queries.trial_records(session, rec)[2], k) for k in queries.REUSED_COLUMNS
        }
        assert (dup.timings, dup.stages, dup.retried, dup.log_path) == ({}, [], [], "/runs/trial-0002/server.log")
        assert queries.server_starts(session, rec) == 2  # the load error and trial 2; not the pre-check, not the repeat


def test_a_new_database_is_stamped_with_this_build_and_opens_again(tmp_path):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    database.open_db(url).dispose()
    engine = database.open_db(url)  # this build's own: opens
    with Session(engine) as session:
        stamp = session.get(SchemaRecord, 1)
        assert (stamp.schema_version, stamp.build) == (SCHEMA_VERSION, BUILD)
        assert session.query(SchemaRecord).count() == 1


def _older_build_database(path) -> None:
    """A database as a build before the stamp made it: the tuner's tables, no autotune_schema."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE autotune_studies (id INTEGER PRIMARY KEY, study_name VARCHAR(512))")
    con.execute("CREATE TABLE autotune_trials (id INTEGER PRIMARY KEY, study_id INTEGER, trial_number INTEGER)")
    con.commit()
    con.close()


def test_a_database_from_a_build_before_the_stamp_is_refused_in_one_line(tmp_path):
    path = tmp_path / "old.db"
    _older_build_database(path)
    url = f"sqlite:///{path}"
    with pytest.raises(database.StorageError) as refused:
        database.open_db(url)
    line = str(refused.value)
    assert "\n" not in line and f"made by a vllm-autotune build before {FIRST_STAMPED_BUILD}" in line
    with pytest.raises(database.StorageError, match="build before"):  # readers refuse it too
        with database.existing_engine(url):
            pass
    assert "autotune_schema" not in inspect(database.create_engine(url)).get_table_names()  # left as it was


def test_a_database_stamped_by_another_schema_is_refused_naming_its_build(tmp_path):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    engine = database.open_db(url)
    with Session(engine) as session:
        stamp = session.get(SchemaRecord, 1)
        stamp.schema_version, stamp.build = SCHEMA_VERSION - 1, "0.0.9"
        session.commit()
    engine.dispose()
    with pytest.raises(database.StorageError) as refused:
        database.open_db(url)
    assert f"made by vllm-autotune 0.0.9 (schema {SCHEMA_VERSION - 1})" in str(refused.value)
    assert f"this build ({BUILD}, schema {SCHEMA_VERSION})" in str(refused.value)


def test_an_older_database_is_exit_code_2_and_one_line_at_the_command_line(tmp_path, capsys):
    from app import cli
    from tests.support.study_loop import LOOP_SCENARIO

    path = tmp_path / "old.db"
    _older_build_database(path)
    code = cli.main(["export", str(LOOP_SCENARIO), "--storage", f"sqlite:///{path}", "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines() == [
        f"autotune: error: --storage sqlite:///{path}: the database was made by a vllm-autotune build before "
        f"{FIRST_STAMPED_BUILD}, and this build ({BUILD}, schema {SCHEMA_VERSION}) does not read it; use that "
        "build for it, or another --storage"
    ]
