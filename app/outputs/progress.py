"""Live progress of a study: trial, phase, elapsed time, last result, current best; then the
confirmation phase run by run, and its verdict.

A rich live panel on a terminal; plain lines elsewhere (CI logs, pipes). A subscriber of the
study loop's events (`search.study.events`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from optuna.trial import FrozenTrial
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from app.outputs.format import fmt_value
from app.outputs.gain_text import gain_headline
from app.outputs.trial_views import measured_text
from app.outputs.verdict_headline import headline
from objectives.scoring import penalty_values
from search.scenario import Scenario
from search.study.events import (
    ConfirmationFinished,
    ConfirmationRunRecorded,
    ConfirmationRunStarted,
    ConfirmationStarted,
    StudyFinished,
    StudyObserver,
    StudyStarted,
    TrialRecorded,
    TrialStarted,
)
from search.trial_results import RetriedStart, capacity_of, retried_of
from storage.tables import ConfirmationRun, TrialRecord, TrialStatus


def retried_text(retried: list[RetriedStart]) -> str:
    """ "; after 1 retried start (killed, 41 s)": starts lost to a transient failure, if any."""
    if not retried:
        return ""
    lost = ", ".join(f"{r.failure.cls.value}, {fmt_value(r.seconds, digits=2)} s" for r in retried)
    return f"; after {len(retried)} retried start{'s' if len(retried) != 1 else ''} ({lost})"


class StudyProgress(StudyObserver):
    def __init__(self, console: Console | None = None):
        self.console = console or Console()
        self.study_name = ""
        self.budget: int | None = None
        self.t0 = time.monotonic()
        self.trial: str = "-"
        self.current_phase: str = "preparing"
        self.phase_t0 = time.monotonic()
        self.last: str = "-"
        self.best: str = "-"
        self.done = 0
        self.objective_names: list[str] = []
        self.scenario: Scenario | None = None
        self.confirming: tuple[int, int] | None = None  # (runs done, runs to do) once the phase starts
        self.measured: dict[int, dict[str, Any]] = {}  # the metrics of the trials recorded here, by number
        self.penalties: list[float] = []  # what the sampler is told for an objective with no value
        self._live: Live | None = None

    def study_started(self, event: StudyStarted) -> None:
        self.study_name, self.budget = event.study_name, event.budget
        self.scenario = event.scenario
        self.objective_names = event.scenario.objective_names
        self.penalties = penalty_values(event.scenario.objectives, event.scenario.workload.request_timeout_s)
        if self.console.is_terminal:
            self._live = Live(self._render(), console=self.console, refresh_per_second=2, get_renderable=self._render)
            self._live.start(refresh=True)
        for note in event.notes:
            self.note(f"[yellow]note[/]: {note}")

    def study_finished(self, event: StudyFinished) -> None:
        if self._live:
            self._live.stop()
            self._live = None

    def _render(self) -> Panel:
        elapsed = time.monotonic() - self.t0
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        budget = f"/{self.budget}" if self.budget else ""
        grid.add_row("trials done", f"{self.done}{budget}   elapsed {elapsed / 60:.1f} min")
        if self.confirming:
            grid.add_row("confirmation", f"{self.confirming[0]}/{self.confirming[1]} runs")
        grid.add_row("trial", self.trial)
        grid.add_row("phase", f"{self.current_phase} ({time.monotonic() - self.phase_t0:.0f} s)")
        grid.add_row("last", self.last)
        grid.add_row("best", self.best)
        return Panel(Group(grid), title=f"study {self.study_name}")

    def note(self, text: str) -> None:
        self.console.print(text)

    def phase(self, name: str) -> None:
        self.current_phase, self.phase_t0 = name, time.monotonic()
        if not self._live:
            self.console.print(f"  [{time.monotonic() - self.t0:6.0f} s] {self.trial}: {name}")

    def calibration_started(self) -> None:
        self._start("calibration")

    def trial_started(self, event: TrialStarted) -> None:
        self._start(event.label)

    def _start(self, label: str) -> None:
        self.trial = label
        self.phase("planning")

    def objectives_text(self, metrics: Mapping[str, Any]) -> str:
        """The objectives as measured: a metric with no value reads `no value (3 failed requests)`,
        never as the penalty the sampler was told for it."""
        return ", ".join(f"{n} {measured_text(metrics, n)}" for n in self.objective_names)

    def best_text(self, best: FrozenTrial) -> str:
        """The best trial's objectives, as measured where its row was recorded here; one recorded
        before (a resumed study) shows the values told, a penalty as no value."""
        if (metrics := self.measured.get(best.number)) is not None:
            return self.objectives_text(metrics)
        told = zip(self.objective_names, best.values, self.penalties)
        return ", ".join(f"{n} {'no value' if v == p else fmt_value(v, digits=4)}" for n, v, p in told)

    def trial_summary(self, row: TrialRecord) -> str:
        """One line: the objective values and feasibility (with load stages: the capacity found
        and the time early aborts saved), or why the trial failed; and any start retried."""
        return self._summary(row) + retried_text(retried_of(row))

    def _summary(self, row: TrialRecord) -> str:
        if row.status == TrialStatus.FAILED:
            return f"failed: {row.failure_class}: {(row.failure_line or '')[:120]}"
        text = f"{self.objectives_text(row.metrics or {})}; {'feasible' if row.feasible else 'violates SLOs'}"
        if (capacity := capacity_of(row)) is not None:
            text += f"; capacity {capacity.summary}"
        saved = sum(s.saved_s or 0 for s in row.stages)
        if saved:
            text += f"; early aborts saved {fmt_value(saved, digits=2)} s"
        if row.client_behind:
            text += "; CLIENT FELL BEHIND its schedule (load was lower than asked)"
        return text

    def trial_recorded(self, event: TrialRecorded) -> None:
        self.done += 1
        self.measured[event.row.trial_number] = event.row.metrics or {}
        self.last = self.trial_summary(event.row)
        self.best = (
            f"trial {event.best.number}: {self.best_text(event.best)}" if event.best else "no feasible trial yet"
        )
        self.console.print(f"{'' if self._live else '  '}{self.trial}: {self.last}")

    # -- the confirmation phase ----------------------------------------------------------------

    def confirmation_started(self, event: ConfirmationStarted) -> None:
        self.confirming = (0, event.remaining)
        when = f", about {event.estimate_s / 60:.0f} min" if event.estimate_s is not None else ""
        self.note(
            f"confirmation: {event.remaining} run{'s' if event.remaining != 1 else ''} to go "
            f"({len(event.labels)} candidates x {event.runs} runs on fresh servers, interleaved{when}): "
            + escape(", ".join(event.labels))
        )
        for note in event.notes:
            self.note(f"[yellow]note[/]: {escape(note)}")

    def confirmation_run_started(self, event: ConfirmationRunStarted) -> None:
        self._start(event.label)

    def run_summary(self, row: ConfirmationRun) -> str:
        """One confirmation run: its objectives and whether it met every SLO, or why it failed."""
        return self._run_summary(row) + retried_text(retried_of(row))

    def _run_summary(self, row: ConfirmationRun) -> str:
        if row.status != TrialStatus.OK:
            return f"failed: {row.failure_class}: {(row.failure_line or '')[:120]}"
        violated = [k for k, v in (row.constraints or {}).items() if v is not None and v > 0]
        text = f"{self.objectives_text(row.metrics or {})}; " + (
            "feasible" if not violated else "violates " + ", ".join(violated)
        )
        if (capacity := capacity_of(row)) is not None:
            text += f"; capacity {capacity.summary}"
        return text

    def confirmation_run_recorded(self, event: ConfirmationRunRecorded) -> None:
        done, total = self.confirming or (0, 0)
        self.confirming = (done + 1, total)
        self.last = self.run_summary(event.row)
        self.console.print(f"{'' if self._live else '  '}{escape(event.label)}: {escape(self.last)}")
        if event.ahead:
            self.note(escape(event.ahead))

    def confirmation_finished(self, event: ConfirmationFinished) -> None:
        assert self.scenario is not None  # the loop tells study_started before any other event
        self.best = headline(event.verdict, self.scenario, self.study_name)
        self.console.print(f"[bold]verdict[/]: {escape(self.best)}")
        if gain := gain_headline(event.verdict, self.scenario):
            self.console.print(f"[bold]verdict[/]: {escape(gain)}")
