"""The realised class mix of every stored load stage: how far each stage's requests, by class, lay
from the scenario's weights times its requests (the representative order keeps every window
within one request for two classes: `loadgen.class_order`). Read from stored studies; nothing
is started.

    .venv/bin/python -m benchmarks.stage_mix --storage runs/autotune.db --study mixed [--study NAME@DB ...]

One row per study and stage kind (search trials' target and capacity stages, confirmation runs'):
the stages, the requests sent, the largest deviation of a class's count from its weight times the
stage's requests, and how many stages lay one request or more off; then the stages that did.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.bench_screening_length import study_refs


@dataclass
class MixTally:
    stages: int = 0
    requests: int = 0
    worst: float = 0.0
    off: list[str] = field(default_factory=list)  # stages one request or more off their weights

    def add(self, where: str, counts: dict[str, int], shares: dict[str, float]) -> None:
        from loadgen import mix_deviation

        n = sum(counts.values())
        deviation = mix_deviation(counts, shares)
        self.stages += 1
        self.requests += n
        self.worst = max(self.worst, deviation)
        if deviation >= 1.0:
            self.off.append(f"{where}: {counts} against { ({c: round(w * n, 2) for c, w in shares.items()}) }")


def study_mix(storage: str, study: str) -> dict[str, MixTally]:
    from sqlalchemy.orm import Session

    from search import scenario as scenario_mod
    from search import trial_results
    from storage import database, queries

    with Session(database.open_db(storage)) as s:
        rec = queries.require_study(s, study)
        sc = scenario_mod.parse(rec.scenario_source, study, scenario_mod.CONFIG_DIR)
        total = sum(c.weight for c in sc.workload.classes)
        shares = {c.name: c.weight / total for c in sc.workload.classes}
        tallies: dict[str, MixTally] = {}
        rows = [(f"trial {t.trial_number}", "search", t) for t in queries.trial_records(s, rec)]
        rows += [
            (f"confirmation {r.trial_number} r{r.round + 1}", "confirmation", r)
            for r in queries.confirmation_runs(s, rec)
        ]
        for label, phase, row in rows:
            for stage in trial_results.stages_of(row):
                counts = stage.class_counts
                if counts:
                    tallies.setdefault(f"{study}: {phase} {stage.kind}", MixTally()).add(
                        f"{label} stage {stage.index + 1}", counts, shares
                    )
    return tallies


def main(argv: Sequence[str] | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--storage", default="runs/autotune.db", help="the database (a path or a storage URL)")
    p.add_argument("--study", action="append", required=True, help="a study, or NAME@DB (repeatable)")
    args = p.parse_args(argv)
    console = Console(width=120)
    table = Table(title="realised class mix of every stored stage")
    for col in ("study: phase stage kind", "stages", "requests", "largest deviation (requests)", "stages >= 1 off"):
        table.add_column(col, justify="left" if col.startswith("study") else "right")
    off: list[str] = []

    def run() -> int:
        from storage import queries

        refs = study_refs(args.study, args.storage)
        for storage, study in refs:  # every name checked before anything is read
            queries.existing_study_check(storage, study, "run `make search` first")
        for storage, study in refs:
            for name, t in study_mix(storage, study).items():
                table.add_row(name, str(t.stages), str(t.requests), f"{t.worst:.2f}", str(len(t.off)))
                off.extend(t.off)
        console.print(table)
        for line in off:
            console.print(f"  off: {line}")
        return 0

    from app.expected_errors import reported

    return reported("stage_mix.py", run)


if __name__ == "__main__":
    raise SystemExit(main())
