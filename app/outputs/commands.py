"""The commands the outputs tell a user to run next, written once so every output names them alike."""

from __future__ import annotations

from search.scenario import Scenario


def confirm_command(scenario: Scenario, study_name: str | None) -> str:
    """The command that runs or finishes a study's confirmation. It names the study: a study need
    not bear its scenario's name, and without `--study` the command would open another one."""
    study = f" --study {study_name}" if study_name else ""
    return f"`autotune confirm {scenario.name}{study}`"
