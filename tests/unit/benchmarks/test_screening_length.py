"""benchmarks/bench_screening_length.py: the screening's length chosen from stored confirmation stages."""

from __future__ import annotations

from benchmarks import bench_screening_length as sl
from loadgen import SAMPLE_KEYS
from objectives.scoring import SLOSpec

P95 = SLOSpec(metric="ttft_p95_ms@short", max=1000.0)


def stored(candidate: str, rate: float, slow_every: int | None, feasible: bool, seconds: float = 90.0):
    rows = []
    for i in range(int(rate * seconds)):
        ttft = 2.0 if slow_every and i % slow_every == slow_every - 1 else 0.2
        rows.append(("short", i / rate, ttft, ttft + 0.3, 10, True, False))
    samples = {k: [r[j] for r in rows] for j, k in enumerate(SAMPLE_KEYS)}
    return sl.StoredRun(candidate, 1, samples, seconds, (P95,), feasible)


def test_slos_of_a_run_are_its_counted_constraints():
    slos = sl.slos_of({"ttft_p95_ms@short<=1131.9": -0.5, "tpot_mean_ms<=50": -0.2, "server_ok": -1.0})
    assert [s.metric for s in slos] == ["ttft_p95_ms@short"] and slos[0].max == 1131.9


def test_the_table_finds_the_shortest_length_that_agrees():
    """A candidate 1 in 12 slow (8%, infeasible by the confirmation): a short screening misses
    its slow requests more often than a long one. A clean one agrees at every length."""
    runs = [stored("clean", 3.0, None, True), stored("slow", 3.0, 12, False)]
    results = sl.table(runs, [2.0, 30.0], cap=2.0, slice_share=0.5)
    short, _ = results[2.0]
    long, seconds = results[30.0]
    assert long.feasibility.agreed == 2 and long.meets()
    assert short.feasibility.agreed < 2
    assert 30.0 <= seconds <= 60.0


def test_a_stage_shorter_than_the_cap_is_left_out():
    results = sl.table([stored("clean", 3.0, None, True, seconds=40.0)], [30.0], cap=2.0, slice_share=0.5)
    assert results[30.0][0].feasibility.of == 0


def test_a_study_may_name_its_own_database():
    refs = sl.study_refs(["mixed", "mixed@/tmp/fresh/runs/autotune.db", "s@postgresql://h/db"], "runs/autotune.db")
    assert refs[0] == (f"sqlite:///{sl.Path('runs/autotune.db').resolve()}", "mixed")
    assert refs[1] == ("sqlite:////tmp/fresh/runs/autotune.db", "mixed")
    assert refs[2] == ("postgresql://h/db", "s")
