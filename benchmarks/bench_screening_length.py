"""How long must the screening's target stage be to agree with the confirmation? Read from
stored studies; nothing is started.

Every confirmation run stores its target stage's requests (the full target stage: 45 s at the
target load in `mixed`), and the confirmation's call on each candidate (feasible at the target,
from the pooled requests of all its runs) is the reference. A screening of nominal length L is
emulated on each run's stored target stage: the stage is looked at every `slice` x L, run on
while an SLO is undecided up to `cap` x L (`objectives.slo_verdict.StageLength`, the stage rule
of `objectives.stages`), and called by its verdict there (`stage_passed`); a stored stage shorter
than the cap leaves that run out, so with 45 s stages and `--cap 2` the lengths go up to 22.5 s
(`--cap 1`: plain lengths up to 45 s). Per L the table gives the share of (candidate, run)
screenings that agree with the confirmation's call, with its exact 90% interval, and the mean
seconds a stage ran; the shortest L that agrees on at least 90% is the one to set
(`objectives.agreement.shortest_agreeing`). Then each study's own screening (its trials) against
its confirmation, and all the studies' candidates pooled: the table of the default studies.
Counted SLOs only (percentiles, the error rate): the cut stages have no means or throughputs.

    .venv/bin/python -m benchmarks.bench_screening_length --storage runs/autotune.db --study mixed \\
        [--study mixed-2 ...] [--study mixed@/tmp/fresh/runs/autotune.db] [--lengths 15,20,30,45]
        [--cap 2] [--slice 0.5] [--confidence 0.9]

`NAME@DB` reads that study from another database (a file path or a storage URL), so studies run
on other clones pool in one table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.bench_stopping import storage_url
from objectives.agreement import Agreement, Call, CandidateAgreement, agreement, pooled, shortest_agreeing
from objectives.scoring import SLOSpec
from objectives.slo_verdict import (
    DEFAULT_CONFIDENCE,
    StageLength,
    count_limit,
    emulate,
    stage_passed,
)

DEFAULT_LENGTHS = (10.0, 15.0, 20.0, 30.0, 45.0)


@dataclass(frozen=True)
class StoredRun:
    """One confirmation run's target stage, and the confirmation's call on its candidate."""

    candidate: str  # study: label
    round: int
    samples: dict[str, list]
    elapsed_s: float
    slos: tuple[SLOSpec, ...]  # the counted SLOs, bounds as resolved for the study
    confirmed_feasible: bool | None


def slos_of(constraints: dict[str, Any]) -> tuple[SLOSpec, ...]:
    """The counted SLOs a stored run was held to, from its constraint names (`metric<=bound`)."""
    out = []
    for key in constraints:
        metric, sep, bound = key.partition("<=")
        if sep:
            slo = SLOSpec(metric=metric, max=float(bound))
            if count_limit(slo) is not None:
                out.append(slo)
    return tuple(out)


def screen(run: StoredRun, length: StageLength, confidence: float) -> tuple[bool, float]:
    """(the emulated screening's call: feasible, the seconds it ran)."""
    stop, verdicts = emulate(run.slos, run.samples, length, confidence)
    return stage_passed(verdicts), stop


def table(
    runs: Sequence[StoredRun],
    lengths: Sequence[float],
    cap: float,
    slice_share: float,
    confidence: float = DEFAULT_CONFIDENCE,
) -> dict[float, tuple[Agreement, float]]:
    """Per nominal length: the agreement of the emulated screenings with the confirmation, and
    their mean seconds. A length whose cap is longer than a stored stage leaves that run out."""
    out = {}
    for nominal in lengths:
        length = StageLength(nominal, cap * nominal, slice_share * nominal)
        rows, seconds = [], []
        for run in runs:
            if run.elapsed_s < length.cap_s - 1e-6:
                continue
            call, stop = screen(run, length, confidence)
            seconds.append(stop)
            rows.append(CandidateAgreement(f"{run.candidate} r{run.round}", Call(call), Call(run.confirmed_feasible)))
        out[nominal] = (agreement(rows), statistics.fmean(seconds) if seconds else float("nan"))
    return out


def stored_runs(storage: str, study: str) -> list[StoredRun]:
    """The study's confirmation runs that stored their target stage's requests."""
    from sqlalchemy.orm import Session

    from search import scenario as scenario_mod
    from search import trial_results
    from search.study.verdict import stored_verdict
    from storage import database, queries

    with Session(database.open_db(storage)) as s:
        rec = queries.require_study(s, study)
        sc = scenario_mod.parse(rec.scenario_source, study, scenario_mod.CONFIG_DIR)
        verdict = stored_verdict(s, rec, sc)
        calls = {c.trial_number: (c.label, c.feasible) for c in verdict.candidates} if verdict else {}
        out = []
        for run in queries.confirmation_runs(s, rec):
            stages = trial_results.stages_of(run)
            if run.status != "ok" or not stages or stages[0].samples is None or run.trial_number not in calls:
                continue
            label, feasible = calls[run.trial_number]
            out.append(
                StoredRun(
                    f"{study}: {label}",
                    run.round + 1,
                    stages[0].samples,
                    stages[0].elapsed_s,
                    slos_of(run.constraints or {}),
                    feasible,
                )
            )
    return out


def study_refs(studies: Sequence[str], default_storage: str) -> list[tuple[str, str]]:
    """(storage URL, study name) per `--study`: `NAME`, in `--storage`, or `NAME@DB`."""
    out = []
    for ref in studies:
        name, at, where = ref.partition("@")
        out.append((storage_url(where) if at else storage_url(default_storage), name))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--storage", default=f"sqlite:///{REPO / 'runs' / 'autotune.db'}")
    ap.add_argument(
        "--study",
        action="append",
        required=True,
        help="a study with a confirmation phase, NAME or NAME@DB (repeatable)",
    )
    ap.add_argument("--lengths", default=",".join(f"{x:g}" for x in DEFAULT_LENGTHS), help="nominal lengths (s)")
    ap.add_argument("--cap", type=float, default=2.0, help="the most a stage runs on to, x its nominal length")
    ap.add_argument("--slice", type=float, default=0.5, help="how often a stage is looked at, x its nominal length")
    ap.add_argument("--confidence", type=float, default=DEFAULT_CONFIDENCE)
    args = ap.parse_args(argv)
    refs = study_refs(args.study, args.storage)
    runs = [r for storage, name in refs for r in stored_runs(storage, name)]
    if runs:
        emulated(runs, args)
    else:
        print("no confirmation run with a stored target stage in these studies: nothing to emulate")
    print("\nthe studies' own screening against their confirmation (per confirmed candidate):")
    studies = [(name, a) for storage, name in refs if (a := study_agreement(storage, name)) is not None]
    for name, a in studies:
        print(f"  {name}: feasibility {a.feasibility.text()}; capacity within interval {a.capacity.text()}")
    if studies:
        print("  all studies: " + "; ".join(pooled([a for _, a in studies]).lines()))
    return 0 if runs or studies else 2


def emulated(runs: Sequence[StoredRun], args: argparse.Namespace) -> None:
    """The table of emulated screening lengths (see the module docstring)."""
    lengths = [float(x) for x in args.lengths.split(",") if x.strip()]
    results = table(runs, lengths, args.cap, args.slice, args.confidence)
    print(f"{len(runs)} confirmation runs of {len({r.candidate for r in runs})} candidates")
    print(f"cap {args.cap:g}x, looked at every {args.slice:g}x, confidence {args.confidence:g}")
    print(f"{'nominal s':>9}  {'mean s':>7}  agreement with the confirmation's feasibility call")
    for nominal, (agree, seconds) in results.items():
        print(f"{nominal:>9g}  {seconds:>7.1f}  {agree.feasibility.text()}")
    best = shortest_agreeing({k: a for k, (a, _) in results.items()})
    print(f"shortest agreeing on >= 90%: {best:g} s" if best is not None else "no length agrees on >= 90% of the runs")


def study_agreement(storage: str, study: str) -> Agreement | None:
    """A study's screening against its confirmation (`LoadedStudy.screening_agreement`)."""
    from sqlalchemy.orm import Session

    from app.outputs import load_study
    from storage import database

    with Session(database.open_db(storage)) as s:
        return load_study(s, storage, study).screening_agreement()


if __name__ == "__main__":
    raise SystemExit(main())
