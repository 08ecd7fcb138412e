"""A full disk: outputs written whole or not at all, one line and exit code 3 when one
is not, `autotune export` writing them again, and the free-space check before the study and
before each trial. Disk full is injected (ENOSPC from the write, `shutil.disk_usage` faked); the
study is the real loop on a scripted executor.
"""

import errno
import os
import re
import shlex
import shutil
from types import SimpleNamespace

import pytest

import search.prepare
import search.study.loop
from app.cli import EXIT_OUTPUT_MISSING, main
from search import disk
from search.disk import KiB, MiB, OutputNotWritten, write_atomic
from search.study import StudyStopped
from tests.support.fakes import ctx
from tests.support.scripted_executor import ScriptedExecutor
from tests.support.study_loop import LOOP_SCENARIO, Recorder, rows, runner

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def free_space(monkeypatch, *free: int) -> list[int]:
    """`shutil.disk_usage` reports `free` bytes free, one value per call, the last one from then on."""
    left = list(free)

    def usage(path):
        value = left.pop(0) if len(left) > 1 else left[0]
        return SimpleNamespace(total=100 * 2**30, used=0, free=value)

    monkeypatch.setattr(shutil, "disk_usage", usage)
    return left


def disk_fills_writing(monkeypatch, name: str) -> None:
    """Writing a temporary file for `name` fills the disk halfway through its text."""
    real = os.write

    def write(fd, data):
        if re.search(rf"/\.{re.escape(name)}\.\w+\.tmp$", os.readlink(f"/proc/self/fd/{fd}")):
            real(fd, bytes(data[: len(data) // 2]))
            raise ENOSPC
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


# -- writing a file atomically --------------------------------------------------------------------


def test_a_write_that_fails_midway_leaves_the_previous_file_and_no_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "report.html"
    write_atomic(target, "the good report")
    disk_fills_writing(monkeypatch, "report.html")
    free_space(monkeypatch, 652 * KiB)
    with pytest.raises(OutputNotWritten) as raised:
        write_atomic(target, "a new report " * 1000)
    assert target.read_text() == "the good report"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]
    assert str(raised.value) == f"{target}: No space left on device (652 KiB free in {tmp_path})"
    assert raised.value.disk_full


def test_a_sync_that_fails_leaves_the_previous_file_and_no_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "best.yaml"
    target.write_text("good: 1\n")

    def fsync(fd):
        raise ENOSPC

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OutputNotWritten):
        write_atomic(target, "new: 2\n")
    assert target.read_text() == "good: 1\n" and [p.name for p in tmp_path.iterdir()] == ["best.yaml"]


def test_a_written_file_is_whole_and_made_as_open_would_make_it(tmp_path):
    target = tmp_path / "new" / "pareto.yaml"
    previous = os.umask(0o022)
    try:
        write_atomic(target, "é" * 100_000)
    finally:
        os.umask(previous)
    assert target.read_text(encoding="utf-8") == "é" * 100_000
    assert target.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in target.parent.iterdir()] == ["pareto.yaml"]


# -- the CLI: one line, exit code 3, then `autotune export` ---------------------------------------


@pytest.fixture
def scripted_cli(monkeypatch):
    executor = ScriptedExecutor()
    monkeypatch.setattr(search.prepare, "launch_context", lambda model=None: ctx())
    monkeypatch.setattr(search.study.loop, "vllm_executor", lambda prep: executor.factory)
    return executor


def test_an_output_that_cannot_be_written_is_one_line_exit_3_and_the_export_it_names_writes_them_all(
    tmp_path, monkeypatch, capsys, scripted_cli
):
    storage = f"sqlite:///{tmp_path / 'cli.db'}"
    search_args = [
        "search",
        str(LOOP_SCENARIO),
        "--storage",
        storage,
        "--runs-dir",
        str(tmp_path),
        "--confirm-runs",
        "0",
    ]
    out_dir = tmp_path / "loop"
    assert main([*search_args, "--trials", "1"]) == 0
    good = {name: (out_dir / name).read_text() for name in ("best.yaml", "pareto.yaml", "report.html")}
    capsys.readouterr()

    free_space(monkeypatch, 50 * 2**30)
    with monkeypatch.context() as full:
        disk_fills_writing(full, "report.html")
        assert main([*search_args, "--trials", "2"]) == EXIT_OUTPUT_MISSING
    [line] = capsys.readouterr().err.splitlines()
    report = out_dir / "report.html"
    assert line == (
        f"autotune: the study is stored, but an output was not written: {report}: No space left on "
        f"device (50 GiB free in {out_dir}); make room, then `autotune export {LOOP_SCENARIO} "
        f"--storage {storage} --runs-dir {tmp_path}` writes best.yaml, pareto.yaml and report.html again"
    )
    assert len(rows(runner(tmp_path, ScriptedExecutor(), storage=storage))) == 2  # both trials stored
    assert report.read_text() == good["report.html"]  # the previous report, whole
    assert sorted(p.name for p in out_dir.iterdir() if p.is_file()) == [
        ".lock",
        "best.yaml",
        "pareto.yaml",
        "report.html",
    ]

    command = shlex.split(line.split("`")[1])
    assert command[:2] == ["autotune", "export"]
    assert main(command[1:]) == 0
    assert report.read_text() != good["report.html"] and "trial 1" in report.read_text()
    assert all((out_dir / name).stat().st_size > 0 for name in good)


def test_a_write_refused_for_permission_says_so_and_names_no_disk_space_fix(
    tmp_path, monkeypatch, capsys, scripted_cli
):
    storage = f"sqlite:///{tmp_path / 'cli.db'}"
    args = [
        "search",
        str(LOOP_SCENARIO),
        "--storage",
        storage,
        "--runs-dir",
        str(tmp_path),
        "--trials",
        "1",
        "--confirm-runs",
        "0",
    ]
    real = os.open

    def refused(path, flags, mode=0o777, **kw):
        if str(path).endswith(".tmp"):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real(path, flags, mode, **kw)

    monkeypatch.setattr(os, "open", refused)
    assert main(args) == EXIT_OUTPUT_MISSING
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(
        f"autotune: the study is stored, but an output was not written: "
        f"{tmp_path / 'loop' / 'best.yaml'}: Permission denied ("
    )
    assert "; fix that, then `autotune export " in line


# -- free space before the study and before each trial --------------------------------------------


def needs(done: int, left: int) -> disk.Room:
    return disk.Room(disk.Path("."), 0, done, left)


def test_no_room_for_one_trial_stops_the_study_before_anything_starts(tmp_path, monkeypatch):
    executor = ScriptedExecutor()
    free_space(monkeypatch, needs(0, 3).next_start - 1)
    with pytest.raises(
        StudyStopped,
        match=re.escape(
            f"free in {tmp_path / 'loop'}, less than one more trial needs (about 5.3 MiB: its server log and "
            f"rows, 256 KiB, and the outputs written after it, 5.0 MiB); 0 trials stored, no new server started; "
            f"make room, then run the same command to go on"
        ),
    ):
        runner(tmp_path, executor, trials=3).run()
    assert executor.plans == []


def test_room_for_some_trials_but_not_all_is_one_warning_before_the_first(tmp_path, monkeypatch):
    executor, events = ScriptedExecutor(), Recorder()
    free_space(monkeypatch, needs(0, 3).rest - 1)
    runner(tmp_path, executor, trials=3, observers=[events]).run()
    [warning] = [n for n in events.notes if "free in" in n]
    assert warning == (
        f"warning: 5.8 MiB free in {tmp_path / 'loop'} holds about 2 of the 3 server starts "
        f"left (trials and confirmation runs, 256 KiB each) and the outputs (5.1 MiB); the study "
        f"stops before a trial it has no room for"
    )
    assert events.events.index(("note", warning)) < events.names.index("trial_started")
    assert len(executor.plans) == 3


def test_plenty_of_room_says_nothing(tmp_path, monkeypatch):
    events = Recorder()
    free_space(monkeypatch, 10 * needs(0, 3).rest)
    runner(tmp_path, ScriptedExecutor(), trials=3, observers=[events]).run()
    assert not [n for n in events.notes if "free in" in n]


def test_a_disk_that_fills_during_the_study_stops_it_before_the_next_trial_in_one_line(
    tmp_path, monkeypatch, capsys, scripted_cli
):
    # before the study, then before trials 0 and 1: plenty; before trial 2: 652 KiB
    free_space(monkeypatch, 50 * MiB, 50 * MiB, 50 * MiB, 652 * KiB)
    storage = f"sqlite:///{tmp_path / 'cli.db'}"
    assert (
        main(
            [
                "search",
                str(LOOP_SCENARIO),
                "--storage",
                storage,
                "--runs-dir",
                str(tmp_path),
                "--trials",
                "3",
                "--confirm-runs",
                "0",
            ]
        )
        == 1
    )
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"autotune: stopped: 652 KiB free in {tmp_path / 'loop'}, less than one more trial needs")
    assert line.endswith("; 2 trials stored, no new server started; make room, then run the same command to go on")
    assert len(scripted_cli.plans) == 2
    assert len(rows(runner(tmp_path, ScriptedExecutor(), storage=storage))) == 2


def test_a_study_with_nothing_left_to_run_is_not_stopped_for_space(tmp_path, monkeypatch):
    runner(tmp_path, ScriptedExecutor(), trials=1).run()
    free_space(monkeypatch, 1 * KiB)
    executor = ScriptedExecutor()
    runner(tmp_path, executor, trials=1).run()  # the budget is spent and no confirmation: nothing starts
    assert executor.plans == []
