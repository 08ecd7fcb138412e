"""Optuna's attributes of a study and of its trials: the one module that writes them.

They are not a second store. What a trial measured, how it ended and who ran it where are the
project's rows (`storage.tables`, written by `search.trial_results`), and every output reads
those. Optuna's attributes hold only what is read from Optuna's side:

- by a sampler or another worker, off trials that have no row yet (a row is stored once a trial
  is measured): the baseline or earlier study's winner an enqueued trial runs, who runs a trial
  now and which trial it runs again (a worker is judged dead by it), the proposal it follows,
  the move its diagnosis calls for, and its constraints (`search.pareto.CONSTRAINT_LIST`);
- by the next run or another worker, of the study: the trial budget its workers share, a run's
  price (`search.study.price`: numbers that are no measurement);
- by optuna-dashboard, which reads nothing but Optuna's tables: the columns of its trial table
  and the study's setup, written only when a subscriber shows them (`TrialAttributes.display`).

Optuna refuses to change a finished trial, so a trial's attributes are written before it is
told: at its claim, and by the recording step (`TrialAttributes.recorded`, then
`write_constraints`); observers only read them, after the tell. Every write overwrites, so a
step tried again after the database was away writes the same.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import optuna

from loadgen import CLIENT_BEHIND, json_safe
from objectives.diagnosis import Diagnosis
from search import pareto
from search.proposals import MOVE_ATTR, PROPOSAL_ATTR, WARM_START_ATTR, move_for
from search.trial_results import capacity_of
from serving import Failure, Hardware, unset_value
from storage.tables import TrialRecord

# -- the names -------------------------------------------------------------------------------

BASELINE_ATTR = "baseline"  # trial: the baseline an enqueued trial runs (a retry keeps it)
# trial: who runs it (`coordination.WorkerId.as_dict()`: host, pid, process start, loop token,
# slot). The row's `worker` column keeps where a measured trial ran; this is what another worker
# judges a running trial's worker by, before any row exists, and all that is left of who ran a
# trial that never finished.
WORKER_ATTR = "worker"
RETRY_OF_ATTR = "retry_of"  # trial: the trial number this one runs again (Optuna's retry callback queued it)
BUDGET_ATTR = "budget"  # study: the trial budget its workers share (`autotune worker`'s default)
PRICE_ATTR = "usd_per_hour"  # study: a run's --usd-per-hour (`search.study.price`)


# -- a study's --------------------------------------------------------------------------------


def keep_budget(study: optuna.Study, budget: int) -> None:
    study.set_user_attr(BUDGET_ATTR, budget)


def keep_price(study: optuna.Study, usd_per_hour: float | None) -> None:
    """Keep a run's --usd-per-hour with the study (None: the run gave none; a stored one stays)."""
    if usd_per_hour is not None:
        study.set_user_attr(PRICE_ATTR, float(usd_per_hour))


def show_setup(study: optuna.Study, scenario: str, vllm: str, hardware: str, notes: list[str]) -> None:
    """What optuna-dashboard shows of where the study is measured: its scenario, the installed
    vLLM, the machine, and what the space and the baselines lost on this vLLM."""
    for key, value in {"scenario": scenario, "vllm": vllm, "hardware": hardware, "notes": notes}.items():
        study.set_user_attr(key, value)


# -- a trial's, before it runs ----------------------------------------------------------------


def enqueue_baseline(study: optuna.Study, params: dict[str, Any], name: str) -> None:
    study.enqueue_trial(params, user_attrs={BASELINE_ATTR: name})


def enqueue_warm_start(study: optuna.Study, params: dict[str, Any], label: str) -> None:
    """An earlier study's winner, queued with whose winner it is (`label`)."""
    study.enqueue_trial(params, user_attrs={WARM_START_ATTR: label})


def mark_claimed(trial: optuna.Trial, worker: dict[str, Any], retry_of: int | None) -> None:
    """Who runs `trial` (`WORKER_ATTR`), and the trial it runs again, if it does."""
    trial.set_user_attr(WORKER_ATTR, worker)
    if retry_of is not None:
        trial.set_user_attr(RETRY_OF_ATTR, retry_of)


def mark_proposed(trial: optuna.Trial, reason: str) -> None:
    """Why the diagnosis proposed `trial`: the proposer reads it off the last sampled trial, which
    may still run on another worker, so it is written as the trial starts."""
    trial.set_user_attr(PROPOSAL_ATTR, reason)


# -- a trial's, when it is recorded -----------------------------------------------------------


@dataclass(frozen=True)
class Moves:
    """The searched knobs and what the server runs each with when a configuration leaves it
    unset (a baseline's): what a trial's move (`search.proposals.move_for`) starts from."""

    searched: tuple[str, ...]
    unset: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, searched: Iterable[str], hardware: Hardware) -> Moves:
        names = tuple(searched)
        return cls(names, {k: unset_value(k, hardware) for k in names})


@dataclass(frozen=True)
class TrialAttributes:
    """What the recording writes with a trial besides its constraints: the display columns when
    `display` (a subscriber shows optuna-dashboard's trial table), and the move its diagnosis
    calls for when `moves` (the sampler follows the diagnoses)."""

    display: bool = False
    moves: Moves | None = None

    def recorded(
        self,
        trial: optuna.Trial,
        row: TrialRecord,
        diagnosis: Diagnosis,
        failure: Failure | None,
        metrics: dict[str, float],
    ) -> None:
        """Written by the recording step with the trial's row stored, before Optuna is told."""
        attrs = display_attrs(row, diagnosis, failure, metrics) if self.display else {}
        if self.moves is not None:
            move = move_for(diagnosis, row.config, metrics, self.moves.searched, self.moves.unset)
            if move is not None:
                attrs[MOVE_ATTR] = move.as_dict()
        for key, value in attrs.items():
            trial.set_user_attr(key, json_safe(value))


def write_constraints(trial: optuna.Trial, constraints: dict[str, float]) -> None:
    """The constraints in the one format Optuna's samplers and optuna-dashboard 0.21 both read,
    the pre-5.0 positional list, with their names beside it (`pareto.CONSTRAINT_LIST`); never also
    by `Trial.set_constraint`, which the samplers would read as a second copy of each. Optuna 5
    has no public way to write that list (its trial's system attributes are read-only; the
    deprecated sampler `constraints_func` writes it, but not for every sampler), so this is the
    study's one write through Optuna's private storage. Both writes overwrite: a tell a kill cut
    short is told again whole."""
    names, listed = pareto.constraint_attrs(constraints)
    trial.set_user_attr(pareto.CONSTRAINT_NAMES_ATTR, names)
    trial.storage.set_trial_system_attr(trial._trial_id, pareto.CONSTRAINT_LIST, listed)


def display_attrs(
    row: TrialRecord, diagnosis: Diagnosis, failure: Failure | None, metrics: dict[str, float]
) -> dict[str, Any]:
    """optuna-dashboard's trial table (filterable, sortable): how the trial went, its capacity,
    every measured number as `m:<key>`, and its diagnosis. Copies of the row's columns, kept only
    because the dashboard reads nothing else; the study itself never reads them back."""
    attrs: dict[str, Any] = {
        "status": row.status,
        "feasible": row.feasible,
        # its numbers are suspect: a column for the dashboard only (the selection rule and the
        # outputs read the row's `client_behind`)
        CLIENT_BEHIND: row.client_behind,
        "violated": [k for k, v in row.constraints.items() if v > 0],
        "adjustments": [a["detail"] for a in row.adjustments],
    }
    if failure:
        attrs["failure"] = failure.summary()
    if (capacity := capacity_of(row)) is not None:
        attrs["capacity"] = capacity.summary
    attrs.update({f"m:{k}": v for k, v in metrics.items() if isinstance(v, (int, float))})
    return {**attrs, **diagnosis_attrs(diagnosis)}


def diagnosis_attrs(diagnosis: Diagnosis) -> dict[str, Any]:
    """The diagnosis as optuna-dashboard's trial table shows it."""
    return {
        "bottleneck": diagnosis.bottleneck,
        "diagnosis": diagnosis.headline,
        "next_step": (diagnosis.next_steps or [""])[0],
        "antipatterns": [f.code for f in diagnosis.findings],
    }
