"""Per-request samples: `loadgen.request_samples`, carried by every stage row, stored in
the `samples` column (added to an older database), and the scenario's `capacity.early_abort`."""

from __future__ import annotations

from datetime import datetime

import pytest
from sqlalchemy.orm import Session

from loadgen import SAMPLE_KEYS, RequestRecord, records_from_samples, request_samples
from loadgen.request_record import ABORTED, HTTP_ERROR
from objectives.stages import CapacitySpec
from storage import database, queries
from storage.tables import StageRecord, StudyRecord, TrialRecord

T0 = 100.0


def record(
    i: int,
    send: float,
    ttft: float | None,
    tokens: int = 4,
    cls: str = "a",
    warmup: bool = False,
    error: str | None = None,
) -> RequestRecord:
    r = RequestRecord(i, cls, send, 10, tokens, warmup=warmup)
    r.send_time = send
    if ttft is not None:
        r.chunk_times = [send + ttft + 0.01 * k for k in range(tokens)]
        r.completion_tokens = tokens
    if error is not None:
        r.fail(error, "x", send + 1.0)
    else:
        r.end_time = r.chunk_times[-1]
    return r


def test_request_samples_are_columnar_rounded_and_leave_out_warmup_and_unsent():
    unsent = RequestRecord(9, "a", T0 + 9, 10, 4)
    records = [
        record(0, T0 - 5, 0.2, warmup=True),
        record(1, T0 + 0.123456789, 0.2),
        record(2, T0 + 1.0, None, error=HTTP_ERROR),
        record(3, T0 + 2.0, 0.5, tokens=2, cls="b"),
        record(4, T0 + 3.0, None, error=ABORTED),
        unsent,
    ]
    s = request_samples(records, T0)
    assert tuple(s) == SAMPLE_KEYS
    assert s["class"] == ["a", "a", "b", "a"]
    assert s["sent_s"] == [0.1235, 1.0, 2.0, 3.0]
    assert s["ttft_s"] == [0.2, None, 0.5, None]
    assert s["e2e_s"] == [0.23, None, 0.51, None]
    assert s["output_tokens"] == [4, 0, 2, 0]
    assert s["ok"] == [True, False, True, False]
    assert s["aborted"] == [False, False, False, True]
    # TPOT as vllm bench serve: (e2e - ttft) / (tokens - 1)
    assert (s["e2e_s"][0] - s["ttft_s"][0]) / 3 == pytest.approx(0.01)


def test_records_rebuilt_from_samples_keep_the_latencies():
    records = [record(1, T0 + 0.5, 0.2, tokens=5), record(2, T0 + 1.0, None, error=ABORTED)]
    back = records_from_samples(request_samples(records, T0), end_s=4.0)
    assert back[0].ttft == pytest.approx(0.2) and back[0].e2el == pytest.approx(0.24)
    assert back[0].ok and back[0].output_tokens == 5 and back[0].end_time == pytest.approx(0.74)
    assert back[1].aborted and back[1].end_time == 4.0 and not back[1].chunk_times


def test_stage_rows_store_their_samples(tmp_path):
    engine = database.open_db(f"sqlite:///{tmp_path / 'x.db'}")
    samples = {
        "class": ["a"],
        "sent_s": [0.5],
        "ttft_s": [0.2],
        "e2e_s": [0.3],
        "output_tokens": [4],
        "ok": [True],
        "aborted": [False],
    }
    stage = dict(
        stage_index=0,
        kind="target",
        rate=1.0,
        planned_s=10.0,
        elapsed_s=10.0,
        passed=True,
        margin=-0.5,
        violations={},
        metrics={},
        server_diagnostics={},
        notes=[],
        samples=samples,
    )
    with Session(engine) as session:
        study = StudyRecord(
            study_name="s",
            scenario_name="m",
            scenario_source="",
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
                stages=[StageRecord(**s) for s in [stage]],
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
    with Session(engine) as session:
        assert session.query(StageRecord).one().samples == samples


@pytest.mark.parametrize(
    "given, rule",
    [
        (None, "decided"),
        ("decided", "decided"),
        ("likely", "likely"),
        ("certain", "certain"),
        (True, "certain"),
        ("true", "certain"),
        (False, "off"),
        ("off", "off"),
    ],
)
def test_early_abort_takes_a_rule_and_the_old_booleans(given, rule):
    spec = CapacitySpec() if given is None else CapacitySpec(early_abort=given)
    assert spec.early_abort == rule


def test_a_bad_early_abort_is_one_clear_line():
    from pathlib import Path

    from search.scenario import ScenarioError, parse

    text = Path("configs/mixed.yaml").read_text().replace("early_abort: decided", "early_abort: maybe")
    assert "early_abort: maybe" in text
    with pytest.raises(ScenarioError) as e:
        parse(text, "mixed.yaml", Path("configs").resolve())
    lines = [line for line in str(e.value).splitlines() if "early_abort" in line]
    assert len(lines) == 1 and "'decided', 'likely', 'certain' or 'off'" in lines[0] and "maybe" in lines[0]
