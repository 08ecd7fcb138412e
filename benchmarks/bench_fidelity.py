"""Does screening short find the winner that full measurements find, and what does it save?

Reads stored studies (nothing is started). In a study whose scenario has `screening:`, every
search trial was measured short and every confirmation run in full, on the same configurations:
for each confirmed candidate this prints its screened value of each objective beside the median
[95% interval] of its full runs, whether the screened value falls inside that interval, and the
time of a screened trial against a full run. Over all candidates: Kendall's tau between the
screened and the confirmed order of the selection rule's metric, and whether the screening's
first pick is the verdict's.

    .venv/bin/python -m benchmarks.bench_fidelity --storage sqlite:///runs/autotune.db --study mixed [--study ...]
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from rich.console import Console
from rich.table import Table
from scipy import stats
from sqlalchemy.orm import Session

from app.expected_errors import reported
from app.outputs import fmt_value, load_study
from search import pareto
from search.study.verdict import stored_verdict
from storage import database, queries


def study_rows(session: Session, storage: str, name: str):
    ls = load_study(session, storage, name)
    verdict = stored_verdict(session, ls.record, ls.scenario)
    if verdict is None:
        raise SystemExit(f"study {name!r} has no confirmation phase")
    sc = ls.scenario
    runs = queries.confirmation_runs(session, ls.record)
    out = []
    for cand in verdict.candidates:
        trial = ls.trials[cand.trial_number]
        full_s = [r.timings.get("total_s") for r in runs if r.trial_number == cand.trial_number and r.timings]
        out.append(
            {
                "label": cand.label,
                "trial": trial,
                "cand": cand,
                "screened": [
                    trial.metrics.get(m, math.nan) if trial.status == "ok" else math.nan for m in sc.objective_names
                ],
                "confirmed": [cand.metrics[m] for m in sc.objective_names],
                "screened_s": (trial.timings or {}).get("total_s"),
                "full_s": float(np.median(full_s)) if full_s else None,
            }
        )
    return ls, verdict, out


def report(console: Console, storage: str, name: str) -> None:
    with Session(database.open_db(storage)) as session:
        ls, verdict, rows = study_rows(session, storage, name)
    sc = ls.scenario
    table = Table(title=f"study {name}: screened ({sc.screening}) against confirmed (full, {verdict.runs_done} runs)")
    table.add_column("candidate")
    for m in sc.objective_names:
        table.add_column(f"{m}\nscreened", justify="right")
        table.add_column(f"{m}\nconfirmed [95%]", justify="right")
    table.add_column("inside", justify="center")
    table.add_column("trial s\nscreened / full", justify="right")
    for row in rows:
        cells = [row["label"]]
        inside = []
        for v, iv in zip(row["screened"], row["confirmed"]):
            cells += [fmt_value(v), f"{fmt_value(iv.value)} [{fmt_value(iv.low)}, {fmt_value(iv.high)}]"]
            inside.append("y" if iv.contains(v) else "n")
        cells += ["".join(inside), f"{fmt_value(row['screened_s'])} / {fmt_value(row['full_s'])}"]
        table.add_row(*cells)
    console.print(table)
    names, directions = sc.objective_names, sc.directions
    feasible = [r for r in rows if r["cand"].feasible]
    screened_rank = pareto.rank([r["screened"] for r in feasible], directions, names, sc.selection)
    confirmed_rank = pareto.rank(
        [[iv.value for iv in r["confirmed"]] for r in feasible], directions, names, sc.selection
    )
    if len(feasible) >= 2:
        tau = stats.kendalltau(
            [screened_rank.index(i) for i in range(len(feasible))],
            [confirmed_rank.index(i) for i in range(len(feasible))],
        ).statistic
        console.print(
            f"Kendall tau, screened vs confirmed order of the {len(feasible)} confirmed-feasible candidates: {tau:+.2f}"
        )
    if feasible:
        console.print(
            f"first by the rule: screened {feasible[screened_rank[0]]['label']}, confirmed "
            f"{feasible[confirmed_rank[0]]['label']}; verdict: {verdict.outcome.value}"
            + (f" {verdict.recommended.label}" if verdict.recommended else "")
        )
    pairs = [(r["screened_s"], r["full_s"]) for r in rows if r["screened_s"] and r["full_s"]]
    if pairs:
        share = sum(s for s, _ in pairs) / sum(f for _, f in pairs)
        console.print(
            f"screened trials took {share:.0%} of the time of full runs of the same configs "
            f"(medians of the full runs, summed over {len(pairs)} candidates; an early abort shortens either)"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--storage", default="sqlite:///runs/autotune.db")
    ap.add_argument("--study", action="append", default=None)
    args = ap.parse_args(argv)
    console = Console(width=200)

    def run() -> int:
        for name in args.study or ["mixed"]:
            queries.existing_study_check(args.storage, name, "run `make search` first")
            report(console, args.storage, name)
        return 0

    return reported("bench_fidelity.py", run)


if __name__ == "__main__":
    raise SystemExit(main())
