"""The commands the outputs tell a user to run next, written once so every output names them alike."""

from __future__ import annotations

from search.scenario import Scenario


def confirm_command(scenario: Scenario, study_name: str | None, runs: int | None = None) -> str:
    """The command that runs or finishes a study's confirmation (with `runs`: that many runs a
    candidate, the stored ones kept). It names the study: a study need not bear its scenario's
    name, and without `--study` the command would open another one."""
    study = f" --study {study_name}" if study_name else ""
    more = f" --confirm-runs {runs}" if runs else ""
    return f"`autotune confirm {scenario.name}{study}{more}`"
