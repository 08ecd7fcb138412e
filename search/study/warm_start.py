"""A warm start (`--warm-start STUDY`): an earlier study in the same storage, as prior knowledge.

The earlier study must have been measured on the same model (path and revision), vLLM build and
machine as this run (`setup_changes`, the check a resume passes) and score the same objectives in
the same directions; otherwise it is refused, with what differs, before anything runs. Its
scenario may differ otherwise (another load, other SLOs, another space): the run says so, and
only the knobs this study searches, within its ranges, carry over.

What it gives the new study:
- its confirmed winner (without a confirmation, or an incomplete one: its best feasible trial by
  the scenario's selection rule) is enqueued as a candidate, measured after the baselines;
- its completed trials, on this study's space, are the TPE sampler's prior (`search.proposals.
  PriorSampler`): seen by the sampler, never stored as trials of this study.
Its measured values are never copied: every configuration is measured again here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from search import pareto
from search import scenario as scenario_mod
from search import space as space_mod
from search.prepare import Prepared
from search.proposals import WARM_START_ATTR, prior_trials
from search.study.attributes import enqueue_warm_start
from search.study.errors import StudyMismatch
from search.study.opening import setup_changes
from search.study.verdict import Outcome, stored_verdict
from storage import queries
from storage.tables import StudyRecord
from storage.url import redacted


@dataclass(frozen=True)
class WarmStart:
    study_name: str
    prior: list[FrozenTrial]  # its completed trials on this study's space
    winner: dict[str, Any] | None  # the params to enqueue (None: nothing to enqueue)
    winner_label: str  # "the confirmed winner of study 'x' (trial 7)"
    notes: tuple[str, ...] = ()


def _refusal(name: str, why: str) -> StudyMismatch:
    return StudyMismatch(
        f"--warm-start {name}: {why}; warm-start from a study of the same model, vLLM build and "
        f"machine, or run without --warm-start"
    )


def require_stored(prep: Prepared, name: str) -> None:
    """Refuse a warm start from a study that is not in this storage before anything, its
    database file included, is created."""
    try:
        queries.existing_study_check(prep.storage_url, name, "")
    except LookupError:
        raise _refusal(name, f"no study of that name in {redacted(prep.storage_url)}") from None


def _winner(session: Session, rec: StudyRecord, earlier: optuna.Study, prep: Prepared) -> tuple[int | None, str]:
    """Its confirmed winner, else its search's pick; and how to say which."""
    where = f"the scenario stored with study {rec.study_name!r}"
    shown = Path(prep.shown)
    base_dir = (shown if shown.is_absolute() else scenario_mod.CONFIG_DIR.parent / shown).parent
    sc = scenario_mod.parse(rec.scenario_source, where, base_dir)
    verdict = stored_verdict(session, rec, sc)
    if verdict is not None and verdict.recommended is not None:  # what RECOMMEND and KEEP_BASELINE deploy
        return verdict.recommended.trial_number, "the confirmed winner"
    if verdict is not None and verdict.outcome == Outcome.NONE_FEASIBLE:
        return None, "nothing (its confirmation found no configuration that met the SLOs)"
    chosen = pareto.chosen(earlier, sc, queries.clients_behind(session, rec))
    return (
        (chosen.number, "the best feasible trial (not confirmed)") if chosen else (None, "nothing (no feasible trial)")
    )


def open_warm_start(prep: Prepared, engine: Engine, storage: BaseStorage, name: str) -> WarmStart:
    """The earlier study `name`, checked against this run (StudyMismatch says what differs)."""
    if name == prep.study_name:
        raise _refusal(name, "that is this study itself (a resume already knows its own trials)")
    with Session(engine) as session:
        rec = queries.find_study(session, name)
        if rec is None:
            raise _refusal(name, f"no study of that name in {redacted(prep.storage_url)}")
        if changes := setup_changes(rec, prep.ctx):
            raise _refusal(name, f"it was measured elsewhere ({'; '.join(changes)})")
        sc = prep.scenario
        if list(rec.objective_names) != sc.objective_names or list(rec.directions) != list(sc.directions):
            raise _refusal(
                name,
                f"it scored other objectives ({', '.join(rec.objective_names)}, "
                f"{'/'.join(rec.directions)}; this scenario: {', '.join(sc.objective_names)}, "
                f"{'/'.join(sc.directions)})",
            )
        earlier = optuna.load_study(study_name=name, storage=storage)
        number, which = _winner(session, rec, earlier, prep)
        rows = {r.trial_number: r for r in queries.trial_records(session, rec)}
        same_scenario = rec.scenario_digest == scenario_mod.digest(prep.source)
    notes = (
        []
        if same_scenario
        else [
            f"warm start: study {name!r} ran another version of the scenario (load, SLOs or space may differ): "
            f"only the knobs searched here, within this space's ranges, carry over"
        ]
    )
    label = f"{which} of study {name!r}" + (f" (trial {number})" if number is not None else "")
    winner = None
    row = rows.get(number) if number is not None else None
    if row is not None and row.baseline:
        notes.append(f"warm start: {label} is its baseline {row.baseline}, measured here as a baseline again")
    elif row is not None:
        winner = {k: v for k, v in row.params.items() if k in prep.dists and space_mod.representable(v, prep.dists[k])}
        if lost := sorted(set(row.params) - set(winner)):
            notes.append(f"warm start: {label} set {', '.join(lost)} outside this space: sampled here instead")
    prior = prior_trials(earlier.get_trials(deepcopy=False), prep.dists)
    notes.insert(
        0,
        f"warm start from study {name!r}: {label}"
        + (" enqueued" if winner is not None else "")
        + f"; {len(prior)} of its trials inform the sampler (their values are not copied: every "
        f"configuration is measured here)",
    )
    return WarmStart(name, prior, winner, label, tuple(notes))


def enqueue_winner(engine: Engine, study: optuna.Study, rec: StudyRecord, warm: WarmStart) -> None:
    """The earlier winner queued once per study (under the study's claim, as the baselines)."""
    if warm.winner is None:
        return
    with queries.claimed(engine, rec.id):
        if any(WARM_START_ATTR in t.user_attrs for t in study.get_trials(deepcopy=False)):
            return
        enqueue_warm_start(study, warm.winner, warm.winner_label)
