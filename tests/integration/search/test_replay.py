"""The replay bench end to end: the default sampler beats random on the recorded CPU landscape
(a statistical property, half a minute of studies), and the benchmark scripts, run as a user
runs them (`python -m benchmarks.NAME` from the repository's root; each forked from an
interpreter that has imported the tuner, tests.support.cli.run_forked), refuse bad input in one
line.
"""

from benchmarks.bench_search import bench
from benchmarks.replayed_study import CPU_LANDSCAPE, world
from search.samplers import scenario_default


def test_the_default_sampler_finds_more_than_random_at_budget_20():
    """The CI bench: on the recorded CPU landscape, mixed's default sampler and
    random, 8 seeds at budget 20, in one run; no absolute value. Budget 20: at 10 and below no
    sampler separates from random on this landscape (docs/search.md)."""
    default = scenario_default(world(str(CPU_LANDSCAPE)).scenario)
    summary, _ = bench(CPU_LANDSCAPE, [default, "random"], seeds=8, budgets=(20,), jobs=1)
    hv = {name: s["budgets"]["20"]["hv"]["median"] for name, s in summary["samplers"].items()}
    assert hv[default] > hv["random"], hv


def test_the_benchmark_scripts_refuse_bad_input_in_one_line_with_exit_code_2(tmp_path):
    from tests.support.cli import run_forked

    def script(module, *args):
        done = run_forked(module, *args, timeout=120)
        return done.returncode, done.stderr.strip().splitlines()

    (tmp_path / "empty.json").write_text("{}")
    for args, said in [
        (
            ["benchmarks.bench_search", "--landscape", "runs/no-such-landscape.json"],
            "bench_search.py: error: runs/no-such-landscape.json: no such file or directory",
        ),
        (
            ["benchmarks.bench_search", "--landscape", tmp_path / "empty.json"],
            f"bench_search.py: error: {tmp_path / 'empty.json'}: not a landscape file: schema None, expected 1",
        ),
        (
            [
                "benchmarks.bench_landscape",
                "record",
                "--scenario",
                "no-such-scenario",
                "--storage",
                f"sqlite:///{tmp_path}/l.db",
            ],
            "bench_landscape.py: error: unknown scenario 'no-such-scenario'",
        ),
        (
            [
                "benchmarks.bench_landscape",
                "export",
                "--storage",
                f"sqlite:///{tmp_path}/l.db",
                "--study",
                "nope",
            ],
            f"bench_landscape.py: error: no study named 'nope' in sqlite:///{tmp_path}/l.db; record it first",
        ),
        (
            ["benchmarks.bench_fidelity", "--storage", f"sqlite:///{tmp_path}/l.db", "--study", "nope"],
            f"bench_fidelity.py: error: no study named 'nope' in sqlite:///{tmp_path}/l.db; run `make search` first",
        ),
        (
            ["benchmarks.plan_check", "--storage", f"sqlite:///{tmp_path}/l.db", "--study", "nope"],
            f"plan_check.py: error: no study named 'nope' in sqlite:///{tmp_path}/l.db; run `make search` first",
        ),
        (
            ["benchmarks.stage_mix", "--storage", f"sqlite:///{tmp_path}/l.db", "--study", "nope"],
            f"stage_mix.py: error: no study named 'nope' in sqlite:///{tmp_path}/l.db; run `make search` first",
        ),
        (
            ["benchmarks.bench_capacity", "--scenario", "no-such-scenario"],
            "bench_capacity.py: error: unknown scenario 'no-such-scenario'",
        ),
    ]:
        code, err = script(*map(str, args))
        assert code == 2 and len(err) == 1 and err[0].startswith(said), (args, err)
    assert not (tmp_path / "l.db").exists()  # a reader given a wrong path creates no database there
