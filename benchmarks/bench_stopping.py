"""Replay the stopping rules over stored load stages: what each would have stopped, saved, and got wrong.

Reads stored studies (nothing is started). Every stage row with per-request samples (trials'
`autotune_stages` rows and confirmation runs' stages) that ran to its end is replayed through
each rule as if the stage were running: the requests in the order they were sent, each known as
far as it had come at the moment of the check (asked every 0.5 s, as the load run asks), against
the study's resolved SLOs. Per rule: the stages it would have stopped, the seconds of sending
that saved, and its wrong stops: a stop as a miss of a stage whose full run met every SLO, or a
stop as a pass of one whose full run missed. Stages an abort already cut short are left out:
their full verdict is unknown. The rules:

  certain             the exact rule (`capacity.early_abort: certain`)
  decided             the stage verdict at its looks (`decided`, the default), the stored stage
                      taken as the cap of a stage 1.5 times shorter: a stop there is its end
  likely              the 95 %-likely rule (`likely`; a likely pass on capacity stages)
  over-saturation     the queue and TTFT both climbing, alone

The server's waiting-queue gauge is not stored with a stage, so the replay stands in for it with
the requests sent and still without their first token (`stage_replay.waiting_proxy`).

    .venv/bin/python -m benchmarks.bench_stopping [--storage runs/autotune.db] [--study NAME ...]
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.expected_errors import reported
from loadgen import AbortCheck, RequestRecord, records_from_samples
from objectives.early_abort import CERTAIN, DECIDED, LIKELY, abort_check
from objectives.saturation import over_saturated
from objectives.scoring import SLOSpec
from objectives.stage_replay import replay, waiting_proxy
from objectives.stages import CAPACITY, CapacitySpec, stage_slos
from search.calibration import CalibrationResult, resolve
from search.scenario import CONFIG_DIR, ScenarioError, parse
from storage import database, queries
from storage.tables import StudyRecord

DEFAULT_STORAGE = Path("runs/autotune.db")


@dataclass
class StoredStage:
    """What a replay needs of one stored stage row (a StageRecord, or a confirmation's dict)."""

    kind: str
    rate: float
    elapsed_s: float
    requests_planned: int
    passed: bool
    samples: dict[str, list]

    @classmethod
    def of(cls, row: dict[str, Any]) -> StoredStage | None:
        """None for a stage without samples or cut short by an abort (its full verdict is unknown)."""
        if not row.get("samples") or row.get("aborted"):
            return None
        return cls(
            row["kind"],
            row["rate"],
            row["elapsed_s"],
            row.get("requests_planned") or 0,
            bool(row["passed"]),
            row["samples"],
        )

    def records(self) -> list[RequestRecord]:
        """Every planned request: those sent, rebuilt from the samples, and any never sent."""
        sent = records_from_samples(self.samples, self.elapsed_s)
        unsent = [
            RequestRecord(len(sent) + i, sent[-1].class_name if sent else "", math.nan, 0, 1)
            for i in range(max(0, self.requests_planned - len(sent)))
        ]
        return sent + unsent


RuleFactory = Callable[[Sequence[SLOSpec], StoredStage], AbortCheck]


def _saturation_only(slos: Sequence[SLOSpec], stage: StoredStage) -> AbortCheck:
    return lambda records, now, gauges: over_saturated(gauges, records, now)


def _decided(slos: Sequence[SLOSpec], stage: StoredStage) -> AbortCheck:
    """The decided rule as if the stored stage were the cap of one 1.5 times shorter, looked at
    every half of that (the defaults, `CapacitySpec().length`): a stop there is its planned end."""
    length = CapacitySpec().length(stage.elapsed_s / CapacitySpec().extend_to)
    first = stage.samples["sent_s"][0] if stage.samples.get("sent_s") else 0.0
    return abort_check(slos, stage.rate, DECIDED, stage.kind == CAPACITY, length=length, first_offset=first)


RULES: dict[str, RuleFactory] = {
    "certain": lambda slos, stage: abort_check(slos, stage.rate, CERTAIN),
    "decided": _decided,
    "likely": lambda slos, stage: abort_check(slos, stage.rate, LIKELY, capacity_stage=stage.kind == CAPACITY),
    "over-saturation": _saturation_only,
}


@dataclass
class Tally:
    stages: int = 0
    stopped: int = 0
    stopped_missing: int = 0
    stopped_passing: int = 0
    wrong: int = 0  # stopped one way, the full stage decided the other
    saved_s: float = 0.0
    elapsed_s: float = 0.0
    reasons: list[str] = field(default_factory=list)

    @property
    def wrong_share(self) -> float:
        return self.wrong / self.stopped if self.stopped else math.nan


def replay_stages(
    stages: Iterable[StoredStage], slos: Sequence[SLOSpec], rules: dict[str, RuleFactory] = RULES
) -> dict[str, Tally]:
    """Per rule, what it would have done on these stages against these (stage) SLOs."""
    tallies = {name: Tally() for name in rules}
    for stage in stages:
        records = stage.records()
        gauges = waiting_proxy(records, stage.elapsed_s)
        for name, make in rules.items():
            tally = tallies[name]
            tally.stages += 1
            tally.elapsed_s += stage.elapsed_s
            out = replay(make(slos, stage), records, stage.elapsed_s, gauges)
            if out is None:
                continue
            when, why = out
            tally.stopped += 1
            tally.saved_s += stage.elapsed_s - when
            tally.stopped_passing += why.passed
            tally.stopped_missing += not why.passed
            tally.wrong += why.passed != stage.passed
            tally.reasons.append(why.reason)
    return tallies


def study_slos(study: StudyRecord) -> list[SLOSpec]:
    """The SLOs a stage of this study was held to, resolved as the study ran them."""
    scenario = parse(study.scenario_source, f"study {study.study_name}", CONFIG_DIR)
    cal = CalibrationResult.from_dict(study.calibration) if study.calibration else None
    return stage_slos(resolve(scenario, cal)[1])


def stored_stages(study: StudyRecord) -> list[StoredStage]:
    rows: list[dict[str, Any]] = [
        {c: getattr(s, c) for c in ("kind", "rate", "elapsed_s", "requests_planned", "passed", "samples", "aborted")}
        for t in study.trials
        for s in t.stages
    ]
    rows += [s for run in study.confirmations for s in (run.stages or [])]
    return [s for s in (StoredStage.of(r) for r in rows) if s is not None]


def storage_url(text: str) -> str:
    return text if "://" in text else f"sqlite:///{Path(text).resolve()}"


def report(tallies: dict[str, Tally], console: Console, title: str) -> None:
    table = Table(title=title)
    for col in ("rule", "stages", "stopped", "as miss", "as pass", "wrong", "wrong share", "saved (s)", "saved share"):
        table.add_column(col, justify="left" if col == "rule" else "right")
    for name, t in tallies.items():
        table.add_row(
            name,
            str(t.stages),
            str(t.stopped),
            str(t.stopped_missing),
            str(t.stopped_passing),
            str(t.wrong),
            f"{t.wrong_share:.1%}" if t.stopped else "-",
            f"{t.saved_s:.1f}",
            f"{t.saved_s / t.elapsed_s:.1%}" if t.elapsed_s else "-",
        )
    console.print(table)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--storage", default=str(DEFAULT_STORAGE), help="SQLite file or SQLAlchemy URL")
    ap.add_argument("--study", action="append", help="a study's name (repeatable); default: every study")
    args = ap.parse_args(argv)
    return reported("bench_stopping.py", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    console = Console()
    if not console.is_terminal:  # a log or a pipe: wide enough for the table
        console.width = 150
    if "://" not in args.storage and not Path(args.storage).exists():
        console.print(f"no study database at {args.storage}")
        return 1
    url = storage_url(args.storage)
    with Session(database.open_db(url)) as session:
        studies = (
            [queries.require_study(session, n) for n in args.study]
            if args.study
            else list(session.scalars(select(StudyRecord).order_by(StudyRecord.id)))
        )
        everything: dict[str, Tally] = {name: Tally() for name in RULES}
        for study in studies:
            try:
                slos = study_slos(study)
            except (ScenarioError, ValueError, TypeError) as e:
                console.print(f"{study.study_name}: skipped, its scenario no longer reads ({e})")
                continue
            stages = stored_stages(study)
            if not stages:
                console.print(f"{study.study_name}: no stage stored with its samples that ran to its end")
                continue
            tallies = replay_stages(stages, slos)
            report(tallies, console, f"{study.study_name}: {len(stages)} stages replayed")
            for name, t in tallies.items():
                total = everything[name]
                for attr in ("stages", "stopped", "stopped_missing", "stopped_passing", "wrong"):
                    setattr(total, attr, getattr(total, attr) + getattr(t, attr))
                total.saved_s += t.saved_s
                total.elapsed_s += t.elapsed_s
        if len(studies) > 1:
            report(everything, console, "every study")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
