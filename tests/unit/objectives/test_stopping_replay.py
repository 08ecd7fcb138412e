"""benchmarks/bench_stopping.py on a study built here: a SQLite file whose stage rows carry
samples with known full verdicts, replayed through the certain, likely and over-saturation rules."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import numpy as np
from sqlalchemy.orm import Session

from benchmarks import bench_stopping as sr
from loadgen import request_samples
from storage import database, queries
from storage.tables import StageRecord, StudyRecord, TrialRecord
from tests.support.simulated_stages import done, saturated_stage

SCENARIO = Path("tests/fixtures/scenarios/loop_capacity.yaml").read_text()  # ttft_p95 <= 2000 ms, tpot_p95 <= 100 ms


def stage_row(index: int, kind: str, records, passed: bool, aborted: str | None = None) -> dict:
    end = max(r.end_time for r in records)
    return dict(
        stage_index=index,
        kind=kind,
        rate=1.0,
        planned_s=end,
        elapsed_s=end,
        passed=passed,
        margin=-0.5 if passed else 0.5,
        aborted=aborted,
        violations={},
        metrics={},
        server_diagnostics={},
        notes=[],
        requests_planned=len(records),
        requests_sent=len(records),
        samples=request_samples(records, 0.0),
    )


def build_study(path: Path) -> None:
    rng = np.random.default_rng(3)
    fast = [done(i, float(i), float(rng.uniform(0.1, 0.3)), tokens=8, itl=0.02) for i in range(40)]
    slow = [done(i, float(i), 3.0 if i % 3 == 0 else 0.2, tokens=8, itl=0.02) for i in range(40)]
    flooded = saturated_stage(rate=4.0, service_rate=2.0, n=120)
    stages = [
        stage_row(0, "target", fast, passed=True),
        stage_row(1, "capacity", slow, passed=False),
        stage_row(2, "capacity", flooded, passed=False),
        stage_row(3, "capacity", slow, passed=False, aborted="certain"),
    ]  # cut short: not replayed
    with Session(database.open_db(f"sqlite:///{path}")) as session:
        study = StudyRecord(
            study_name="built",
            scenario_name="loop_capacity",
            scenario_source=SCENARIO,
            scenario_digest="d",
            model_path="/m",
            vllm_version="v",
            hardware={},
            directions=[],
            objective_names=[],
        )
        session.add(study)
        session.flush()
        queries.save_trial(
            session,
            study,
            TrialRecord(
                trial_number=0,
                stages=[StageRecord(**s) for s in stages],
                status="ok",
                fingerprint="f",
                params={},
                config={},
                flags={},
                command="",
                adjustments=[],
                metrics={},
                server_diagnostics={},
                values=[],
                constraints={},
                feasible=True,
                timings={},
                retried=[],
                diagnosis={"bottleneck": "healthy", "headline": ""},
                started_at=datetime(2026, 11, 22),
            ),
        )
        session.commit()


def test_the_replay_counts_stops_savings_and_wrong_stops_per_rule(tmp_path):
    path = tmp_path / "s.db"
    build_study(path)
    with Session(database.open_db(f"sqlite:///{path}")) as session:
        study = queries.require_study(session, "built")
        stages = sr.stored_stages(study)
        assert [s.passed for s in stages] == [True, False, False]  # the aborted one left out
        tallies = sr.replay_stages(stages, sr.study_slos(study))
    certain, likely, saturation = tallies["certain"], tallies["likely"], tallies["over-saturation"]
    assert certain.stages == likely.stages == saturation.stages == 3
    # a third of the slow stage over 2 s: certain after 3 of 40, likely sooner; the flooded stage too
    assert certain.stopped_missing >= 2 and certain.wrong == 0 and certain.stopped_passing == 0
    assert likely.stopped_missing >= 2 and likely.saved_s > certain.saved_s and likely.wrong == 0
    assert saturation.stopped == 1 and saturation.reasons[0].startswith("over-saturated")
    assert saturation.wrong == 0 and saturation.saved_s > 0


def test_a_wrong_stop_is_counted(tmp_path):
    """The slow stage stored as passed: every rule that stops it as a miss is wrong once."""
    records = [done(i, float(i), 3.0 if i % 3 == 0 else 0.2) for i in range(40)]
    stage = sr.StoredStage("capacity", 1.0, 45.0, 40, True, request_samples(records, 0.0))
    tallies = sr.replay_stages([stage], sr.study_slos(StudyRecord(study_name="x", scenario_source=SCENARIO)))
    assert tallies["certain"].wrong == 1 and tallies["likely"].wrong == 1 and tallies["likely"].wrong_share == 1.0


def test_the_script_prints_a_table_per_study(tmp_path, capsys):
    path = tmp_path / "s.db"
    build_study(path)
    assert sr.main(["--storage", str(path)]) == 0
    out = capsys.readouterr().out
    assert "built: 3 stages replayed" in out and "over-saturation" in out and "likely" in out
    assert sr.main(["--storage", str(tmp_path / "missing.db")]) == 1


def test_the_decided_rule_replays_a_stored_stage_as_the_cap_of_a_shorter_one(tmp_path):
    """The slow stage (a third over 2 s) is decided a miss at its first look; a fast one is
    decided met at the end of the stage it stands for (2/3 of it), neither wrongly."""
    slos = sr.study_slos(StudyRecord(study_name="x", scenario_source=SCENARIO))
    slow = [done(i, float(i) / 4, 3.0 if i % 3 == 0 else 0.2) for i in range(160)]
    fast = [done(i, float(i) / 4, 0.2) for i in range(160)]
    stages = [
        sr.StoredStage("capacity", 4.0, 40.0, 160, False, request_samples(slow, 0.0)),
        sr.StoredStage("capacity", 4.0, 40.0, 160, True, request_samples(fast, 0.0)),
    ]
    decided = sr.replay_stages(stages, slos)["decided"]
    assert decided.stopped == 2 and decided.wrong == 0
    assert decided.stopped_missing == 1 and decided.stopped_passing == 1
