"""`make bench-trial-time` shows each stored start's anatomy and the medians of its phases."""

from rich.console import Console

from benchmarks.bench_trial_time import TrialTime, start_table
from serving import START_PHASES


def stored(number: int, seconds: float, missing: str | None = None) -> TrialTime:
    phases = {p: (None if p == missing else seconds) for p in START_PHASES}
    return TrialTime(
        number, str(number), seconds * len(START_PHASES), [45.0], [False], 0.0, 0.0, 2.0, 100.0, start_phases=phases
    )


def test_each_start_is_a_row_of_its_phases_with_a_median_row_and_missing_lines_as_dashes():
    older = TrialTime(0, "0", 30.0, [45.0], [False], 0.0, 0.0, 2.0, 80.0)  # stored before the anatomy
    table = start_table([older, stored(1, 1.0, missing="warm-up"), stored(2, 3.0)])
    console = Console(width=250, record=True)
    console.print(table)
    lines = console.export_text().splitlines()
    [row1] = [x for x in lines if x.lstrip("│ ").startswith("1 ")]
    [median] = [x for x in lines if "median" in x]
    assert row1.count("1.0") == len(START_PHASES) - 1 and " - " in row1
    assert median.count("2.0") == len(START_PHASES) - 1 and "3.0" in median  # warm-up: one start had it
    assert not [x for x in lines if x.lstrip("│ ").startswith("0 ")]


def test_a_study_stored_before_the_anatomy_shows_no_start_table():
    assert start_table([TrialTime(0, "0", 30.0, [45.0], [False], 0.0, 0.0, 2.0, 80.0)]) is None


def test_a_trial_row_gives_its_stored_anatomy():
    from types import SimpleNamespace

    from benchmarks.bench_trial_time import trial_time

    phases = {p: 1.0 for p in START_PHASES}
    row = SimpleNamespace(
        trial_number=3,
        baseline=None,
        stages=[],
        server_diagnostics={},
        timings={
            "start_s": 9.0,
            "load_s": 45.0,
            "stop_s": 2.0,
            "total_s": 60.0,
            "start_anatomy": {"phases": phases, "vllm_reported": {}},
        },
    )
    assert trial_time(row).start_phases == phases
