"""Where a trial's time goes: server start, each load stage, early aborts, idle waits, stop.

Reads a stored study (nothing is started) and prints per trial the start, each stage's elapsed
seconds (a = aborted early), what the aborts saved, the idle waits between stages, the stop, the
total, the share of the trial outside its load stages: 1 - sum(stage elapsed) / total, and the
KV cache tokens the memory arithmetic predicted against those vLLM logged at the start, and the
start's anatomy (`timings.start_anatomy`, serving/start_anatomy.py: imports, model config, engine
and worker processes, model load, compile, KV cache, kernel warm-ups, CUDA graphs, warm-up, API
server, health, first token, the load's warm-up; trials stored before it was recorded show none).
`total_s` runs from before the server's start to after its stop (search/executor/vllm.py), so the
start is inside it; what is neither start, stage, idle wait nor stop is warm-up, request
building and the executor's own work. Then the same shares over the whole study, and, where the
study has a confirmation, the screening's calls beside the confirmation's (feasible at the target,
capacity with its interval) and the share that agree.

    .venv/bin/python -m benchmarks.bench_trial_time [--storage runs/autotune.db] [--study mixed]

A trial without stages (a scenario without `capacity:`) counts its one load run (`load_s`,
warm-up included) as its stage. Repeats of earlier flags and pre-check rejections started no
server and are left out.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table
from sqlalchemy.orm import Session

from app.outputs import fmt_value, load_study
from serving import START_PHASES, describe_kv_check
from storage import database, queries
from storage.tables import TrialRecord

DEFAULT_STORAGE = Path("runs/autotune.db")


@dataclass
class TrialTime:
    number: int
    label: str
    start_s: float
    stages_s: list[float]
    aborted: list[bool]
    saved_s: float
    idle_s: float
    stop_s: float
    total_s: float
    kv_check: str = ""  # the memory arithmetic's KV cache tokens against vLLM's log
    start_phases: dict[str, float | None] | None = None  # the start's anatomy, where recorded

    @property
    def other_s(self) -> float:
        """Warm-up, request building, drains not waited for, the executor's own work."""
        return self.total_s - self.start_s - sum(self.stages_s) - self.idle_s - self.stop_s

    @property
    def outside_share(self) -> float:
        return 1 - sum(self.stages_s) / self.total_s if self.total_s else float("nan")


def trial_time(row: TrialRecord) -> TrialTime | None:
    """The trial's times from its record, or None when it started no server."""
    t = row.timings or {}
    if not t.get("total_s"):
        return None
    if row.stages:
        stages = [s.elapsed_s for s in row.stages]
        aborted = [bool(s.aborted) for s in row.stages]
        saved, idle = sum(s.saved_s or 0 for s in row.stages), sum(s.idle_wait_s or 0 for s in row.stages)
    else:
        stages = [t["load_s"]] if "load_s" in t else []
        aborted, saved, idle = [False] * len(stages), 0.0, 0.0
    stop = t.get("stop_s", 0.0)
    start = t.get("start_s", 0.0 if stages else t["total_s"] - stop)  # none: it failed to start
    label = f"{row.trial_number}" + (f" ({row.baseline})" if row.baseline else "")
    return TrialTime(
        row.trial_number,
        label,
        start,
        stages,
        aborted,
        saved,
        idle,
        stop,
        t["total_s"],
        describe_kv_check(row.server_diagnostics or {}),
        (t.get("start_anatomy") or {}).get("phases"),
    )


def _s(x: float) -> str:
    return fmt_value(x, digits=3)


def trials_table(times: list[TrialTime], title: str) -> Table:
    table = Table(title=title, caption="seconds; a: the stage was aborted early, saved: what its abort saved")
    table.add_column("trial")
    table.add_column("start", justify="right")
    table.add_column("stages (a: aborted)", min_width=24)
    for name in ("aborts", "saved", "idle", "stop", "other", "total", "outside stages"):
        table.add_column(name, justify="right")
    table.add_column("KV cache tokens")
    for tt in times:
        stages = " + ".join(_s(x) + ("a" if a else "") for x, a in zip(tt.stages_s, tt.aborted)) or "-"
        table.add_row(
            tt.label,
            _s(tt.start_s),
            stages,
            str(sum(tt.aborted)),
            _s(tt.saved_s),
            _s(tt.idle_s),
            _s(tt.stop_s),
            _s(tt.other_s),
            _s(tt.total_s),
            f"{tt.outside_share:.0%}",
            tt.kv_check or "-",
        )
    return table


def study_table(times: list[TrialTime]) -> Table:
    total = sum(tt.total_s for tt in times)
    parts = {
        "server start": sum(tt.start_s for tt in times),
        "load stages": sum(sum(tt.stages_s) for tt in times),
        "idle waits between stages": sum(tt.idle_s for tt in times),
        "server stop": sum(tt.stop_s for tt in times),
        "other (warm-up, request building, ...)": sum(tt.other_s for tt in times),
    }
    table = Table(title=f"study-wide: {len(times)} trials, {total / 60:.1f} min of trial time")
    table.add_column("part")
    table.add_column("s", justify="right")
    table.add_column("share", justify="right")
    for name, seconds in parts.items():
        table.add_row(name, _s(seconds), f"{seconds / total:.0%}" if total else "n/a")
    table.add_row(
        "[bold]outside load stages[/]",
        _s(total - parts["load stages"]),
        f"{1 - parts['load stages'] / total:.0%}" if total else "n/a",
    )
    table.add_row(
        "saved by early aborts (not spent)",
        _s(sum(tt.saved_s for tt in times)),
        f"{sum(tt.saved_s for tt in times) / total:.0%} of the time spent" if total else "n/a",
    )
    return table


def start_table(times: list[TrialTime]) -> Table | None:
    """Each start's phases (seconds; - where vLLM's log had no line for it), and their medians."""
    started = [tt for tt in times if tt.start_phases]
    if not started:
        return None
    table = Table(
        title="where each start's seconds went (vLLM's log lines, to about a second)",
        caption="import: to the API server's first line; health: to /health 200; "
        "first token: of the first request sent; load warm-up: to the first measured request",
    )
    table.add_column("trial")
    for name in START_PHASES:
        table.add_column(name, justify="right")
    table.add_column("start_s", justify="right")

    def cell(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f}"

    for tt in started:
        table.add_row(tt.label, *(cell(tt.start_phases.get(p)) for p in START_PHASES), _s(tt.start_s))
    medians = []
    for p in START_PHASES:
        xs = [tt.start_phases[p] for tt in started if tt.start_phases.get(p) is not None]
        medians.append(cell(statistics.median(xs)) if xs else "-")
    table.add_row("[bold]median[/]", *medians, _s(statistics.median(tt.start_s for tt in started)))
    return table


def storage_url(text: str) -> tuple[str, Path | None]:
    """(SQLAlchemy URL, the SQLite file when it is one): a plain path is a SQLite file."""
    if "://" not in text:
        return f"sqlite:///{Path(text).resolve()}", Path(text)
    path = text.split(":///", 1)[1] if text.startswith("sqlite:///") else None
    return text, Path(path) if path else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--storage", default=str(DEFAULT_STORAGE), help="SQLite file or SQLAlchemy URL")
    ap.add_argument("--study", default="mixed")
    args = ap.parse_args()
    console = Console()
    if not console.is_terminal:  # a log or a pipe: wide enough for five stages on one line
        console.width = 150
    url, path = storage_url(args.storage)
    if path is not None and not path.exists():
        console.print(f"no study database at {path}: run a study first (make search)")
        return 0
    with Session(database.open_db(url)) as session:
        study = queries.find_study(session, args.study)
        if study is None:
            console.print(f"no study {args.study!r} in {url}")
            return 0
        times = [tt for row in queries.trial_records(session, study) if (tt := trial_time(row))]
        agreement = screening_lines(session, url, args.study)
        if not times:
            console.print(f"study {args.study!r}: no trial started a server yet")
            for line in agreement:
                console.print(line, highlight=False)
            return 0
        console.print(trials_table(times, f"study {args.study}: where each trial's time goes"))
    if (starts := start_table(times)) is not None:
        console.print(starts)
    console.print(study_table(times))
    for line in agreement:
        console.print(line, highlight=False)
    return 0


def screening_lines(session: Session, url: str, study: str) -> list[str]:
    """The screening's calls against the confirmation's, where the study has a verdict: whether
    the search phase's shorter measurement says what the confirmation says."""
    text = load_study(session, url, study).verdict_text()
    return text.agreement if text is not None else []


if __name__ == "__main__":
    raise SystemExit(main())
