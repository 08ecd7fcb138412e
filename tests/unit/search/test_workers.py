"""Placing N workers on one machine: disjoint slots, what each server inherits, the parent's
interleaved output, and the refusals (one clear line, exit 2, nothing started)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from app.worker_options import WorkerOptions
from app.workers import (
    CPU,
    DEVICE_LOCK_DIR_ENV,
    GPU,
    Slot,
    SlotError,
    hold,
    slots,
    worker_argv,
    worker_env,
)
from storage import database, queries
from tests.support.paths import FIXTURES

FIXTURES_CALIBRATED = FIXTURES / "scenarios" / "loop_calibrated.yaml"


def test_slots_split_cores_and_gpus_into_disjoint_sets():
    assert slots(2, 0, [0, 1]) == [Slot(CPU, (0,)), Slot(CPU, (1,))]
    four = slots(2, 0, [0, 1, 2, 3, 4])  # the odd core left over, not shared
    assert four == [Slot(CPU, (0, 1)), Slot(CPU, (2, 3))]
    assert slots(2, 4, range(16)) == [Slot(GPU, (0, 1)), Slot(GPU, (2, 3))]
    assert slots(3, 8, range(16))[2] == Slot(GPU, (4, 5))


def test_more_workers_than_devices_is_refused():
    with pytest.raises(SlotError, match=r"--workers 3: 2 CPU core\(s\) available here .* use --workers 2 or fewer"):
        slots(3, 0, [0, 1])
    with pytest.raises(SlotError, match=r"--workers 2: this machine has 1 GPU\(s\)"):
        slots(2, 1, range(8))


def test_a_slot_is_what_its_servers_inherit():
    assert Slot(GPU, (2, 3)).env() == {"CUDA_VISIBLE_DEVICES": "2,3"}
    # The OpenMP threads off the first core, which the API server, engine core and client share.
    assert Slot(CPU, (4, 5, 6, 7)).env() == {"VLLM_CPU_OMP_THREADS_BIND": "5-7"}
    assert Slot(CPU, (1,)).env() == {"VLLM_CPU_OMP_THREADS_BIND": "1"}
    assert Slot.parse("cpu:0-2,5") == Slot(CPU, (0, 1, 2, 5)) and Slot(CPU, (0, 1, 2, 5)).arg == "cpu:0-2,5"
    assert Slot.parse(Slot(GPU, (2, 3)).arg) == Slot(GPU, (2, 3))
    for bad in ("cpu:", "tpu:0", "gpu:a", "0,1"):
        with pytest.raises(SlotError, match="expected cpu:IDS or gpu:IDS"):
            Slot.parse(bad)


def test_a_workers_command_line_holds_no_database_password_and_its_environment_does():
    storage = "postgresql+psycopg://tuner:s3cret@db.example:5432/studies?sslmode=require"
    argv = worker_argv(WorkerOptions(storage=storage, study="mixed", seed=1, trials=4, sampler="tpe"), Slot(CPU, (0,)))
    shown = WorkerOptions.model_validate_json(argv[argv.index("--options") + 1])
    assert shown.storage == "postgresql+psycopg://tuner@db.example:5432/studies?sslmode=require"
    assert not any("s3cret" in arg for arg in argv)
    assert worker_env(storage) == {"PGPASSWORD": "s3cret"}  # what run_all passes to the child


def test_a_url_without_a_password_adds_nothing_to_a_workers_environment():
    local = "postgresql+psycopg://autotune@127.0.0.1:5433/autotune?passfile=/srv/runs/postgres/pgpass"
    assert worker_env(local) == {}
    argv = worker_argv(WorkerOptions(storage=local, study="mixed", seed=1, trials=4, sampler="tpe"), Slot(CPU, (0,)))
    assert WorkerOptions.model_validate_json(argv[argv.index("--options") + 1]).storage == local


def _worker_options_of(argv: list[str]) -> WorkerOptions:
    """The options `autotune worker` runs with for `argv` (after `autotune`), as its parser reads them."""
    from app.cli import build_parser
    from app.cli.studies import _worker_options

    return _worker_options(build_parser().parse_args(argv))


def test_a_workers_options_travel_whole_through_its_command_line():
    given = WorkerOptions(
        storage="postgresql+psycopg://tuner:s3cret@db.example:5432/studies",
        study="mixed",
        runs_dir=Path("elsewhere/runs"),
        scenario="configs/mixed.yaml",
        model="org/name@abc",
        trials=12,
        timeout_min=90.5,
        sampler="tpe",
        seed=8,
        db_outage_s=45,
    )
    argv = worker_argv(given, Slot(GPU, (2, 3)))
    assert argv[argv.index("app.cli") + 1 :] == ["worker", "--options", argv[-3], "--slot", "gpu:2-3"]
    received = _worker_options_of(argv[argv.index("app.cli") + 1 :])
    assert received == given.model_copy(update={"storage": "postgresql+psycopg://tuner@db.example:5432/studies"})


def test_a_worker_started_by_hand_builds_the_same_options_from_its_flags():
    flags = ["--storage", "sqlite:///s.db", "--study", "mixed", "--runs-dir", "r", "--scenario", "s.yaml"]
    flags += ["--model", "m", "--trials", "5", "--timeout-min", "30", "--sampler", "tpe", "--seed", "3"]
    assert _worker_options_of(["worker", *flags, "--db-outage-s", "60"]) == WorkerOptions(
        storage="sqlite:///s.db",
        study="mixed",
        runs_dir=Path("r"),
        scenario="s.yaml",
        model="m",
        trials=5,
        timeout_min=30.0,
        sampler="tpe",
        seed=3,
        db_outage_s=60,
    )
    assert _worker_options_of(["worker", "--storage", "", "--study", "mixed"]) == WorkerOptions(
        storage="", study="mixed"
    )


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["worker"], "the following arguments are required: --storage, --study"),
        (["worker", "--study", "mixed"], "the following arguments are required: --storage"),
        (
            [
                "worker",
                "--options",
                WorkerOptions(storage="sqlite:///s.db", study="a").model_dump_json(),
                "--study",
                "b",
            ],
            "--options holds every option; drop --study",
        ),
        (
            ["worker", "--options", '{"storage": "sqlite:///s.db"}'],
            "--options: not a worker's options: study: Field required",
        ),
        (
            ["worker", "--options", '{"storage": "x", "study": "a", "bogus": 1}'],
            "not a worker's options: bogus: Extra inputs",
        ),
    ],
)
def test_a_worker_without_its_study_or_with_options_twice_is_refused(capsys, argv, line):
    with pytest.raises(SystemExit) as refused:
        _worker_options_of(argv)
    assert refused.value.code == 2
    assert line in capsys.readouterr().err


def test_a_worker_takes_the_joined_studys_scenario_model_and_budget_where_not_given(tmp_path):
    from app.worker_options import JoinedStudy

    joined = JoinedStudy("runs/mixed/scenario.yaml", "/models/stored", 10)
    opts = WorkerOptions(storage="sqlite:///s.db", study="mixed", runs_dir=tmp_path, seed=4).study_options(joined)
    assert (opts.scenario, opts.model, opts.trials, opts.seed) == ("runs/mixed/scenario.yaml", "/models/stored", 10, 4)
    assert (opts.storage, opts.study_name, opts.runs_dir, opts.confirm_runs) == ("sqlite:///s.db", "mixed", tmp_path, 0)
    own = WorkerOptions(storage="s", study="mixed", scenario="mine.yaml", model="m", trials=3).study_options(joined)
    assert (own.scenario, own.model, own.trials, own.seed) == ("mine.yaml", "m", 3, os.getpid())


def test_a_second_tuner_on_the_same_devices_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(DEVICE_LOCK_DIR_ENV, str(tmp_path))
    held = hold(Slot(GPU, (0, 1)), "first")
    hold(Slot(GPU, (2,)), "second")[0].close()  # other devices: fine
    with pytest.raises(
        SlotError,
        match=rf"gpu 1 is in use by pid {os.getpid()} \(study first\): trials side "
        "by side on the same devices would skew",
    ):
        hold(Slot(GPU, (1, 2)), "second")
    assert hold(Slot(GPU, (2,)), "second")  # what the refused one took is released again
    for handle in held:
        handle.close()
    assert hold(Slot(GPU, (0, 1)), "second")  # free once the first is gone


def test_a_worker_joins_with_the_studys_own_scenario_model_and_budget(tmp_path):
    from app.workers import joined_study
    from tests.support.scripted_executor import ScriptedExecutor
    from tests.support.study_loop import LOOP_SCENARIO, runner

    r = runner(tmp_path, ScriptedExecutor(), trials=5)
    r.open()
    elsewhere = tmp_path / "worker-host"
    joined = joined_study(r.prep.storage_url, "loop", elsewhere)
    assert joined.scenario == str(elsewhere / "loop" / "scenario.yaml")
    assert open(joined.scenario).read() == LOOP_SCENARIO.read_text()  # the same digest: the resume check passes
    assert (joined.model, joined.budget) == (str(r.prep.ctx.model.path), 5)


@pytest.mark.parametrize("codes, exit_code", [([0, 130], 130), ([1, 130], 1)])
def test_a_worker_that_stops_early_is_named_and_nothing_is_confirmed(tmp_path, monkeypatch, capsys, codes, exit_code):
    """`search --workers 2`: the study opened here once, then one `autotune worker` per slot, each
    with its own seed; a worker that stopped early is named, and the search ends there (130 when
    every stopped worker was interrupted, else 1)."""
    import app.parallel
    import search.prepare
    from app.cli import main
    from tests.support.fakes import ctx
    from tests.support.study_loop import LOOP_SCENARIO

    started = []
    monkeypatch.setattr(search.prepare, "launch_context", lambda model=None: ctx())
    monkeypatch.setattr(app.parallel, "single_writer", lambda url: False)  # as if a shared database server
    monkeypatch.setattr(app.parallel.workers, "available_cpus", lambda: [0, 1])
    monkeypatch.setattr(app.parallel.workers, "run_all", lambda commands, show, env: started.extend(commands) or codes)
    monkeypatch.setenv(DEVICE_LOCK_DIR_ENV, str(tmp_path / "locks"))
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    assert (
        main(
            [
                "search",
                str(LOOP_SCENARIO),
                "--workers",
                "2",
                "--storage",
                storage,
                "--runs-dir",
                str(tmp_path),
                "--seed",
                "7",
            ]
        )
        == exit_code
    )
    assert [prefix for prefix, _ in started] == ["[w0 cpu 0]", "[w1 cpu 1]"]
    argv = [dict(zip(a[4::2], a[5::2])) for _, a in started]  # after: python -m app.cli worker
    options = [WorkerOptions.model_validate_json(a["--options"]) for a in argv]
    assert [(a["--slot"], o.seed, o.trials, o.study) for a, o in zip(argv, options)] == [
        ("cpu:0", 7, 3, "loop"),
        ("cpu:1", 8, 3, "loop"),
    ]
    failed = "; ".join(f"{prefix} exit {code}" for (prefix, _), code in zip(started, codes) if code)
    out = " ".join(capsys.readouterr().out.split())
    assert f"workers stopped early: {failed}; run the same command to continue where the study stopped" in out
    assert "report:" not in out and not (tmp_path / "loop" / "best.yaml").exists()


def _search_on_two_workers(tmp_path, monkeypatch, *flags: str) -> tuple[int, list]:
    """`autotune search` of the calibrated loop scenario on two workers, on study 'loop' of
    tmp_path/loop.db (as `tests.support.study_loop.runner` keeps it), the workers' start stubbed
    to stop at once: (its exit code, the study's calibration as each start of the workers found it)."""
    import app.parallel
    import search.prepare
    from app.cli import main
    from tests.support.fakes import ctx

    storage = f"sqlite:///{tmp_path / 'loop.db'}"
    found = []

    def run_all(commands, show, env):
        with Session(database.open_db(storage)) as session:
            found.append(queries.require_study(session, "loop").calibration)
        return [130] * len(commands)

    monkeypatch.setattr(search.prepare, "launch_context", lambda model=None: ctx())
    monkeypatch.setattr(app.parallel, "single_writer", lambda url: False)  # as if a shared database server
    monkeypatch.setattr(app.parallel.workers, "available_cpus", lambda: [0, 1])
    monkeypatch.setattr(app.parallel.workers, "run_all", run_all)
    monkeypatch.setenv(DEVICE_LOCK_DIR_ENV, str(tmp_path / "locks"))
    argv = ["search", str(FIXTURES_CALIBRATED), "--workers", "2", "--storage", storage, "--study", "loop"]
    return main([*argv, "--runs-dir", str(tmp_path), "--trials", "3", *flags]), found


def test_recalibrate_on_workers_has_them_measure_the_calibration_again(tmp_path, monkeypatch):
    """`search --workers N --recalibrate`: the workers find the study without its calibration,
    so they measure a new one, once, as for a new study (the first under the study's claim, the
    others reuse it); without the flag they find the stored one."""
    from tests.support.scripted_executor import ScriptedCalibration, ScriptedExecutor
    from tests.support.study_loop import runner

    with pytest.raises(KeyboardInterrupt):  # calibrated, then stopped before its first trial was stored
        runner(
            tmp_path,
            ScriptedExecutor(before=_interrupt),
            scenario=FIXTURES_CALIBRATED,
            trials=3,
            calibrate=ScriptedCalibration(capacity_rps=8.0),
        ).run()
    stored = _stored_calibration(tmp_path)
    assert stored is not None
    assert _search_on_two_workers(tmp_path, monkeypatch) == (130, [stored])
    assert _search_on_two_workers(tmp_path, monkeypatch, "--recalibrate") == (130, [None])


def test_recalibrate_on_workers_is_refused_once_the_study_has_trials(tmp_path, monkeypatch, capsys):
    from tests.support.scripted_executor import ScriptedCalibration, ScriptedExecutor
    from tests.support.study_loop import runner

    runner(tmp_path, ScriptedExecutor(), scenario=FIXTURES_CALIBRATED, trials=1, calibrate=ScriptedCalibration()).run()
    stored = _stored_calibration(tmp_path)
    assert _search_on_two_workers(tmp_path, monkeypatch, "--recalibrate") == (2, [])
    assert capsys.readouterr().err.strip() == (
        "autotune: error: study 'loop' has 1 trial measured at its calibration; a new one would make them "
        "incomparable with the next. Pass --study NEW_NAME with --recalibrate to start a new study on a new "
        "calibration."
    )
    assert _stored_calibration(tmp_path) == stored


def _interrupt(plan) -> None:
    raise KeyboardInterrupt


def _stored_calibration(tmp_path: Path) -> dict | None:
    with Session(database.open_db(f"sqlite:///{tmp_path / 'loop.db'}")) as session:
        return queries.require_study(session, "loop").calibration
