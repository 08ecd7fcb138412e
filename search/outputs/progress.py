"""Live progress of a study: trial, phase, elapsed time, last result, current best.

A rich live panel on a terminal; plain lines elsewhere (CI logs, pipes).
"""

from __future__ import annotations

import time

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table


class StudyProgress:
    def __init__(self, study_name: str, budget: int | None, console: Console | None = None):
        self.console = console or Console()
        self.study_name = study_name
        self.budget = budget
        self.t0 = time.monotonic()
        self.trial: str = "-"
        self.phase: str = "preparing"
        self.phase_t0 = time.monotonic()
        self.last: str = "-"
        self.best: str = "-"
        self.done = 0
        self._live: Live | None = None

    def __enter__(self) -> "StudyProgress":
        if self.console.is_terminal:
            self._live = Live(self._render(), console=self.console, refresh_per_second=2,
                              get_renderable=self._render)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live:
            self._live.__exit__(*exc)

    def _render(self):
        elapsed = time.monotonic() - self.t0
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        budget = f"/{self.budget}" if self.budget else ""
        grid.add_row("trials done", f"{self.done}{budget}   elapsed {elapsed / 60:.1f} min")
        grid.add_row("trial", self.trial)
        grid.add_row("phase", f"{self.phase} ({time.monotonic() - self.phase_t0:.0f} s)")
        grid.add_row("last", self.last)
        grid.add_row("best", self.best)
        return Panel(Group(grid), title=f"study {self.study_name}")

    def note(self, text: str) -> None:
        self.console.print(text)

    def set_phase(self, phase: str) -> None:
        self.phase, self.phase_t0 = phase, time.monotonic()
        if not self._live:
            self.console.print(f"  [{time.monotonic() - self.t0:6.0f} s] {self.trial}: {phase}")

    def start_trial(self, label: str) -> None:
        self.trial = label
        self.set_phase("planning")

    def finish_trial(self, summary: str, best: str | None) -> None:
        self.done += 1
        self.last = summary
        if best:
            self.best = best
        if not self._live:
            self.console.print(f"  {self.trial}: {summary}")
        else:
            self.console.print(f"{self.trial}: {summary}")
