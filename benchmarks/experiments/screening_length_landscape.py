"""Shorter target stages on a recorded landscape: does a screening of L seconds call each
configuration's feasibility at the target as its full-length stage did?

`bench_screening_length` checks a length against the confirmation, whose candidates are few
and rarely near an SLO's bound (the pick and the baselines). A landscape's trials are many and
spread across the bound, so this replays each trial's stored target stage (`samples`) under the
stage rule at nominal length L (`slo_verdict.emulate`, cap and looks as the scenario's) and
compares the call with the stored stage's own call at its full length, and, for configurations
measured more than once, with the majority of their full-length calls. A stored stage cut by a
decided miss is used where the emulated one stops no later than it did.

    .venv/bin/python -m benchmarks.experiments.screening_length_landscape \\
        [--storage runs/landscape-decided.db] [--lengths 15,20,30,45] [--cap 1.5] [--slice 0.5]
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from benchmarks.bench_screening_length import slos_of
from benchmarks.bench_stopping import storage_url
from objectives.agreement import Call, CandidateAgreement, agreement
from objectives.slo_verdict import DEFAULT_CONFIDENCE, StageLength, emulate, stage_passed


def target_stages(storage: str) -> list[tuple[str, dict, float, bool, tuple]]:
    """(config key, samples, elapsed s, full-length call, SLOs) of every trial's target stage."""
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from search import trial_results
    from storage import database, queries
    from storage.tables import StudyRecord

    out = []
    with Session(database.open_db(storage)) as s:
        for study in s.scalars(select(StudyRecord)):
            for row in queries.trial_records(s, study):
                stages = trial_results.stages_of(row)
                if not stages or stages[0].samples is None or row.status != "ok":
                    continue
                key = repr(sorted((row.params or {}).items()))
                target = stages[0]
                out.append((key, target.samples, target.elapsed_s, target.passed, slos_of(row.constraints or {})))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--storage", default="runs/landscape-decided.db")
    ap.add_argument("--lengths", default="10,15,20,25,30,45")
    ap.add_argument("--cap", type=float, default=1.5)
    ap.add_argument("--slice", type=float, default=0.5)
    args = ap.parse_args(argv)
    stages = target_stages(storage_url(args.storage))
    by_config: dict[str, list[bool]] = defaultdict(list)
    for key, _, _, call, _ in stages:
        by_config[key].append(call)
    majority = {k: sum(v) * 2 > len(v) for k, v in by_config.items() if len(v) >= 3}
    print(f"{len(stages)} target stages of {len(by_config)} configurations ({len(majority)} measured 3 times or more)")
    print(f"{'nominal s':>9}  {'used':>4}  {'mean s':>6}  agrees with its full stage   with the majority of repeats")
    for nominal in (float(x) for x in args.lengths.split(",")):
        length = StageLength(nominal, args.cap * nominal, args.slice * nominal)
        own, rep, seconds = [], [], []
        for i, (key, samples, elapsed, call, slos) in enumerate(stages):
            stop, verdicts = emulate(slos, samples, length, DEFAULT_CONFIDENCE)
            if stop > elapsed + 1e-6:
                continue
            short = stage_passed(verdicts)
            seconds.append(stop)
            own.append(CandidateAgreement(f"{i}", Call(short), Call(call)))
            if key in majority:
                rep.append(CandidateAgreement(f"{i}", Call(short), Call(majority[key])))
        mean = sum(seconds) / len(seconds) if seconds else float("nan")
        print(
            f"{nominal:>9g}  {len(own):>4}  {mean:>6.1f}  {agreement(own).feasibility.text():<27}  "
            f"{agreement(rep).feasibility.text()}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
