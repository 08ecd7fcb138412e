"""Our tables, beside Optuna's in the same database.

Optuna keeps params, objective values and constraints; these tables keep what a serving
engineer needs to trust and explain a trial: every measured metric, the server's /metrics
deltas, the exact flags, what was dropped, why a trial failed, and a Pareto snapshot after
every finished trial so the front's history can be queried and plotted.
"""

from __future__ import annotations

import importlib.metadata
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


# The failure values storage must recognise, as stored: serving.failures defines them
# (FailurePhase.PRECHECK, FailureClass.LOAD_ERROR, FailureClass.ZYGOTE), and storage imports nothing
# from serving; tests/unit/storage ties each to its member.
PRECHECK_PHASE = "precheck"  # rejected before any start: no server, no cost
LOAD_ERROR_CLASS = "load_error"  # the load generator failed, not the server: says nothing of the flags
ZYGOTE_CLASS = "zygote"  # the study's zygote did not fork the server: says nothing of the flags either


class TrialStatus(StrEnum):
    """What became of a trial; stored as its value."""

    OK = "ok"  # the server started and the load ran: measured
    FAILED = "failed"  # never measured: pre-check rejection, failed start, or the server died
    DUPLICATE = "duplicate"  # same flags as an earlier trial: its result reused, no server started

    @property
    def cost_a_start(self) -> bool:
        """Ran (or tried) its own configuration, as a duplicate does not; the pre-check may still
        have stopped it before any start (`TrialRecord.counts_against_budget` tells)."""
        return self in (TrialStatus.OK, TrialStatus.FAILED)


def _build() -> str:
    try:
        return importlib.metadata.version("vllm-autotune")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed)"


# This build, as a database it creates records it.
BUILD = _build()
# The shape of these tables, and how a stored stage's verdicts were reached: raised with every
# change to a table or a column, or to the rule that judges a stage (its trials would not compare
# with new ones). A database stamped with another number, or not stamped, was made by another
# build and is refused, not migrated.
SCHEMA_VERSION = 4
# The first build that stamps its databases: one without a stamp was made before it.
FIRST_STAMPED_BUILD = "0.1.0"


class Base(DeclarativeBase):
    type_annotation_map: ClassVar = {dict[str, Any]: JSON, list[Any]: JSON}


class SchemaRecord(Base):
    """Which build made the database, and the shape of its tables: one row (id 1)."""

    __tablename__ = "autotune_schema"

    id: Mapped[int] = mapped_column(primary_key=True)
    schema_version: Mapped[int] = mapped_column(Integer)
    build: Mapped[str] = mapped_column(String(64))  # the vllm-autotune version that created it
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class StudyRecord(Base):
    __tablename__ = "autotune_studies"

    id: Mapped[int] = mapped_column(primary_key=True)
    study_name: Mapped[str] = mapped_column(String(512), unique=True)
    scenario_name: Mapped[str] = mapped_column(String(256))
    scenario_source: Mapped[str] = mapped_column(Text)  # the file as it was when the study began
    scenario_digest: Mapped[str] = mapped_column(String(64))
    model_path: Mapped[str] = mapped_column(Text)  # a local directory, or a Hugging Face hub id
    # A hub model's snapshot: the commit hash its revision resolved to (None: a local directory).
    model_revision: Mapped[str | None] = mapped_column(String(64), nullable=True)
    vllm_version: Mapped[str] = mapped_column(String(64))
    hardware: Mapped[dict[str, Any]] = mapped_column(JSON)
    # What memory_utilization 1.0 meant on the CPU build, fixed when the study began (None: a GPU study).
    cpu_kv_budget_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    directions: Mapped[list[Any]] = mapped_column(JSON)
    objective_names: Mapped[list[Any]] = mapped_column(JSON)
    calibration: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # Run-to-run spread (coefficient of variation) of each objective and SLO metric, from the
    # confirmation phase's repeats: this scenario's noise on this machine.
    noise: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # The confirmation phase's plan, set when it starts: {"runs": R, "candidates": [trial numbers
    # in round order], "notes": [...]}; its runs are ConfirmationRun rows.
    confirmation: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    hv_reference: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    trials: Mapped[list[TrialRecord]] = relationship(back_populates="study", order_by="TrialRecord.trial_number")
    snapshots: Mapped[list[ParetoSnapshot]] = relationship(
        back_populates="study", order_by="ParetoSnapshot.after_trial_number"
    )
    confirmations: Mapped[list[ConfirmationRun]] = relationship(
        back_populates="study", order_by="ConfirmationRun.sequence"
    )


class TrialRecord(Base):
    __tablename__ = "autotune_trials"
    __table_args__ = (UniqueConstraint("study_id", "trial_number"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("autotune_studies.id"), index=True)
    trial_number: Mapped[int] = mapped_column(Integer)
    baseline: Mapped[str | None] = mapped_column(String(128), nullable=True)
    status: Mapped[str] = mapped_column(String(32))  # a TrialStatus value
    fingerprint: Mapped[str] = mapped_column(String(64), index=True)
    failure_class: Mapped[str | None] = mapped_column(String(64), nullable=True)
    failure_phase: Mapped[str | None] = mapped_column(String(32), nullable=True)
    failure_line: Mapped[str | None] = mapped_column(Text, nullable=True)
    duplicate_of: Mapped[int | None] = mapped_column(Integer, nullable=True)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)  # as sampled by Optuna
    config: Mapped[dict[str, Any]] = mapped_column(JSON)  # canonical values as applied
    flags: Mapped[dict[str, Any]] = mapped_column(JSON)  # what vLLM received (YAML keys)
    command: Mapped[str] = mapped_column(Text)
    adjustments: Mapped[list[Any]] = mapped_column(JSON)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)  # flat metrics, client and server_*
    server_diagnostics: Mapped[dict[str, Any]] = mapped_column(JSON)
    values: Mapped[list[Any]] = mapped_column(JSON)  # objective vector told (penalties for a failed trial)
    constraints: Mapped[dict[str, Any]] = mapped_column(JSON)
    feasible: Mapped[bool] = mapped_column(Boolean)
    client_behind: Mapped[bool] = mapped_column(Boolean, default=False)
    diagnosis: Mapped[dict[str, Any]] = mapped_column(JSON)  # objectives.diagnosis.Diagnosis
    timings: Mapped[dict[str, Any]] = mapped_column(JSON)
    log_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    started_at: Mapped[datetime] = mapped_column(DateTime)
    finished_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    # The capacity search's result (objectives.capacity.CapacityEstimate), None without one.
    capacity: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # Earlier server starts of this trial lost to a transient failure and retried on the same
    # flags ([] when the first start counted); search.trial_results writes and reads them.
    retried: Mapped[list[Any]] = mapped_column(JSON)
    # Who ran it where: {"host", "pid", "slot", "neighbours": [{"trial", "worker", "slot"}, ...]},
    # the neighbours being the trials other workers of the study ran when it started.
    worker: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)

    study: Mapped[StudyRecord] = relationship(back_populates="trials")
    stages: Mapped[list[StageRecord]] = relationship(
        back_populates="trial", cascade="all, delete-orphan", order_by="StageRecord.stage_index"
    )

    @property
    def counts_against_budget(self) -> bool:
        """It cost a server start (and so ran a load, or died trying). Pre-check rejections and
        repeats of an earlier trial's flags cost nothing and do not count against the budget."""
        return TrialStatus(self.status).cost_a_start and self.failure_phase != PRECHECK_PHASE

    @property
    def reusable(self) -> bool:
        """May stand for a later trial with the same flags, which then starts no server: a trial
        that ran its own configuration, unless the load generator or the study's zygote failed it
        (the flags were never judged: they are measured again)."""
        return TrialStatus(self.status).cost_a_start and self.failure_class not in (LOAD_ERROR_CLASS, ZYGOTE_CLASS)


class StageRecord(Base):
    """One load stage of a trial's server start: the target load, or a capacity probe."""

    __tablename__ = "autotune_stages"
    __table_args__ = (UniqueConstraint("trial_id", "stage_index"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("autotune_trials.id"), index=True)
    stage_index: Mapped[int] = mapped_column(Integer)  # 0: the target stage
    kind: Mapped[str] = mapped_column(String(16))  # target | capacity
    rate: Mapped[float] = mapped_column(Float)  # offered requests/s
    planned_s: Mapped[float] = mapped_column(Float)
    elapsed_s: Mapped[float] = mapped_column(Float)
    saved_s: Mapped[float] = mapped_column(Float, default=0.0)  # by an early abort
    idle_wait_s: Mapped[float] = mapped_column(Float, default=0.0)
    passed: Mapped[bool] = mapped_column(Boolean)
    margin: Mapped[float | None] = mapped_column(Float, nullable=True)  # worst SLO violation (<= 0: met)
    aborted: Mapped[str | None] = mapped_column(Text, nullable=True)  # why it stopped early
    violations: Mapped[dict[str, Any]] = mapped_column(JSON)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)
    server_diagnostics: Mapped[dict[str, Any]] = mapped_column(JSON)
    prefix_cache_reset: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    requests_planned: Mapped[int] = mapped_column(Integer, default=0)
    requests_sent: Mapped[int] = mapped_column(Integer, default=0)
    notes: Mapped[list[Any]] = mapped_column(JSON)
    # The measured requests, columnar: {"class", "sent_s", "ttft_s", "e2e_s", "output_tokens", "ok",
    # "aborted"} (loadgen.request_samples); None for a stage that sent none.
    samples: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # The metric an early abort raised to its certain lower bound: its value is "at least".
    raised: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # The stage's SLO verdict (met | violated | undecided) and per SLO: {"slo", "verdict", "basis",
    # "margin", and for an SLO decided from counts "limit", "over", "known", "low", "high"}
    # (objectives.slo_verdict.SLOVerdict). None: a stage stored without verdicts.
    verdict: Mapped[str | None] = mapped_column(String(16), nullable=True)
    verdicts: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    # Its size and slice: the requests planned (objectives.stages.plan) and where they start in
    # the workload's sequence; what its time cap cut, if it did.
    stage_requests: Mapped[int] = mapped_column(Integer, default=0)
    first_request: Mapped[int] = mapped_column(Integer, default=0)
    capped: Mapped[str | None] = mapped_column(Text, nullable=True)
    # What the `steady_state` and `class_mix` verdicts rest on (objectives.stages.judgement): the
    # window judged, the first-token lag's and the queue's fitted trends; the requests sent and
    # known by class and the test of their mix.
    steady: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    mix: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)

    trial: Mapped[TrialRecord] = relationship(back_populates="stages")


class ConfirmationRun(Base):
    """One re-measurement of a trial's configuration on a fresh server start, in the confirmation
    phase at the end of a study: the full measurement (every load stage), whatever the search
    phase's screening measured. Rounds are interleaved: every candidate once, then again."""

    __tablename__ = "autotune_confirmations"
    __table_args__ = (UniqueConstraint("study_id", "trial_number", "round"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("autotune_studies.id"), index=True)
    trial_number: Mapped[int] = mapped_column(Integer)  # the trial whose configuration this re-measures
    baseline: Mapped[str | None] = mapped_column(String(128), nullable=True)
    round: Mapped[int] = mapped_column(Integer)  # 0, 1, ...: every candidate runs once per round
    sequence: Mapped[int] = mapped_column(Integer)  # position in the phase's schedule
    status: Mapped[str] = mapped_column(String(32))  # a TrialStatus value (ok or failed)
    failure_class: Mapped[str | None] = mapped_column(String(64), nullable=True)
    failure_phase: Mapped[str | None] = mapped_column(String(32), nullable=True)
    failure_line: Mapped[str | None] = mapped_column(Text, nullable=True)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)
    constraints: Mapped[dict[str, Any]] = mapped_column(JSON)  # this run alone, as scoring sees it
    capacity: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    stages: Mapped[list[Any]] = mapped_column(JSON)  # StageRecord fields per load stage
    timings: Mapped[dict[str, Any]] = mapped_column(JSON)
    command: Mapped[str] = mapped_column(Text)
    log_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    started_at: Mapped[datetime] = mapped_column(DateTime)
    finished_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    retried: Mapped[list[Any]] = mapped_column(JSON)  # as TrialRecord.retried

    study: Mapped[StudyRecord] = relationship(back_populates="confirmations")


class ParetoSnapshot(Base):
    __tablename__ = "autotune_pareto_snapshots"
    __table_args__ = (UniqueConstraint("study_id", "after_trial_number"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("autotune_studies.id"), index=True)
    after_trial_number: Mapped[int] = mapped_column(Integer)
    n_finished: Mapped[int] = mapped_column(Integer)
    n_feasible: Mapped[int] = mapped_column(Integer)
    hypervolume: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    study: Mapped[StudyRecord] = relationship(back_populates="snapshots")
    members: Mapped[list[ParetoMember]] = relationship(
        back_populates="snapshot", cascade="all, delete-orphan", order_by="ParetoMember.trial_number"
    )


class ParetoMember(Base):
    __tablename__ = "autotune_pareto_members"

    id: Mapped[int] = mapped_column(primary_key=True)
    snapshot_id: Mapped[int] = mapped_column(ForeignKey("autotune_pareto_snapshots.id"), index=True)
    trial_number: Mapped[int] = mapped_column(Integer)
    values: Mapped[list[Any]] = mapped_column(JSON)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)

    snapshot: Mapped[ParetoSnapshot] = relationship(back_populates="members")
