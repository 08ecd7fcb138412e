"""The scenario (`Scenario`): its sections together, the checks that span them (metric names
against the workload's classes, capacity and screening against the workload, the built-in
error_rate bound), the names that may become directories, and the objectives a scenario's
own load cannot move."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator, model_validator

from loadgen import MetricName, WorkloadSpec
from objectives.capacity import CAPACITY_KEYS, SLO_CAPACITY_RPS
from objectives.scoring import Direction, ObjectiveSpec, SLOSpec, validate_metric_names
from objectives.stages import CapacitySpec, stage_slos
from search.scenario.sections import (
    SLO,
    Calibration,
    Confirmation,
    Cost,
    Domain,
    Goodput,
    RelativeThreshold,
    Screening,
    Selection,
    ServerSection,
    Strict,
    Threshold,
    VerdictSection,
)
from serving import MACHINE_DEFAULTED, REGISTRY, scenario_flag_problem

# Scenario and study names become directories under the runs directory: one path component
# that cannot be '.', '..' or hidden.
SAFE_NAME_RULE = "use letters, digits, '_', '-', '.' only, starting with a letter, digit or '_'"


def is_safe_name(name: str) -> bool:
    return re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name) is not None


DEFAULT_ERROR_RATE_MAX = 0.01  # every study's bound on error_rate unless its scenario sets one


class Scenario(Strict):
    name: str
    title: str
    description: str = ""
    source: str = ""
    workload: WorkloadSpec
    objectives: list[ObjectiveSpec] = Field(min_length=1, max_length=3)
    slos: list[SLO] = Field(default_factory=list)
    goodput: Goodput | None = None
    selection: Selection = Field(default_factory=Selection)
    search_space: dict[str, Domain]
    server: ServerSection = Field(default_factory=ServerSection)
    baselines: dict[str, dict[str, Any]] = Field(default_factory=dict)
    calibration: Calibration = Field(default_factory=Calibration)
    # Present: after the target load, each trial searches the highest rate meeting every SLO.
    capacity: CapacitySpec | None = None
    screening: Screening | None = None
    confirmation: Confirmation = Field(default_factory=Confirmation)
    verdict: VerdictSection = Field(default_factory=VerdictSection)
    # The hardware's price: with one, the outputs quote the cost per million tokens and requests.
    cost: Cost | None = None
    default_trials: int = Field(default=12, ge=1)
    # The sampler a study of this scenario uses unless --sampler says otherwise (a name of
    # search.samplers, checked by search.prepare); None: search.samplers.DEFAULT_SAMPLER.
    default_sampler: str | None = None

    @field_validator("baselines")
    @classmethod
    def _baselines_allowed_flags(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name, values in v.items():
            if (problem := scenario_flag_problem(values)) is not None:
                raise ValueError(f"{name}: {problem}")
        return v

    @field_validator("name")
    @classmethod
    def _slug(cls, v: str) -> str:
        if not is_safe_name(v):
            raise ValueError(SAFE_NAME_RULE)
        return v

    @field_validator("search_space", mode="before")
    @classmethod
    def _registry_params(cls, space: Any) -> Any:
        unknown = [k for k in space if k not in REGISTRY] if isinstance(space, dict) else []
        if unknown:
            raise ValueError(
                f"unknown parameter(s) {', '.join(unknown)}; tunable parameters: "
                f"{', '.join(REGISTRY)} (`autotune params` shows them on the installed vLLM)"
            )
        return space

    @model_validator(mode="after")
    def _relative_ranges(self) -> Scenario:
        for name, domain in self.search_space.items():
            if domain.relative and name not in MACHINE_DEFAULTED:
                raise ValueError(
                    f"search_space.{name}: x_default applies to the parameters whose default vLLM picks "
                    f"by the machine ({', '.join(MACHINE_DEFAULTED)}); give low/high as numbers"
                )
        return self

    @model_validator(mode="after")
    def _metric_names(self) -> Scenario:
        fields = [(f"objectives.{i}.metric", o.metric) for i, o in enumerate(self.objectives)]
        fields += [(f"slos.{i}.metric", s.metric) for i, s in enumerate(self.slos)]
        for where, metric in fields:
            try:
                validate_metric_names([metric], self.workload.class_names)
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from None
        self._relative_classes()
        return self

    def _relative_classes(self) -> None:
        """A relative bound's `of` names a request class of the workload."""
        bounds = [(f"slos.{i}.{'max' if s.max is not None else 'min'}", s.bound) for i, s in enumerate(self.slos)]
        if self.goodput is not None:
            bounds += [(f"goodput.{f}", getattr(self.goodput, f)) for f in ("ttft_ms", "tpot_ms", "e2el_ms")]
        classes = self.workload.class_names
        for where, bound in bounds:
            if isinstance(bound, RelativeThreshold) and bound.of is not None and bound.of not in classes:
                raise ValueError(
                    f"{where}.of: {bound.of!r} is not a request class of the workload; classes: "
                    f"{', '.join(classes) or 'none (the workload has no classes)'}"
                )

    @model_validator(mode="after")
    def _error_rate_bound(self) -> Scenario:
        # Failed requests must never pay off (their latencies are missing, not slow): a scenario
        # without a bound of its own on error_rate holds the built-in scenarios' one.
        if not any(s.metric == "error_rate" for s in self.slos):
            self.slos.append(SLOSpec[Threshold](metric="error_rate", max=DEFAULT_ERROR_RATE_MAX))
        return self

    @model_validator(mode="after")
    def _capacity(self) -> Scenario:
        used = [o.metric for o in self.objectives] + [s.metric for s in self.slos]
        if self.capacity is None:
            wanted = sorted({m for m in used if m in CAPACITY_KEYS})
            if wanted:
                raise ValueError(
                    f"{', '.join(wanted)}: capacity metrics need a capacity: section "
                    "(the per-trial search for the highest rate meeting the SLOs)"
                )
            return self
        if self.workload.arrival.mode == "closed":
            raise ValueError(
                "capacity: needs an open-loop arrival (poisson, gamma, constant, burst); "
                "a closed loop has no request rate to search"
            )
        if not stage_slos(self.slos):
            raise ValueError(
                "capacity: needs at least one SLO on a load metric (latency, error_rate, "
                "...): capacity is the highest rate that meets them"
            )
        return self

    @model_validator(mode="after")
    def _screening(self) -> Scenario:
        s, wl = self.screening, self.workload
        if s is None:
            return self
        for name in ("duration_s", "num_requests"):
            short, full = getattr(s, name), getattr(wl, name)
            if short is not None and (full is None or short > full):
                raise ValueError(
                    f"screening.{name}: {short:g} must be at most workload.{name} "
                    f"({'unset' if full is None else f'{full:g}'}): screening is the cheaper measurement"
                )
        if s.max_stages is not None:
            if self.capacity is None:
                raise ValueError("screening.max_stages: the scenario has no capacity: section")
            if s.max_stages > self.capacity.max_stages:
                raise ValueError(
                    f"screening.max_stages: {s.max_stages} must be at most capacity.max_stages "
                    f"({self.capacity.max_stages})"
                )
        return self

    @model_validator(mode="after")
    def _selection_metrics(self) -> Scenario:
        names = [o.metric for o in self.objectives]
        for field_name in ("metric", "then"):
            value = getattr(self.selection, field_name)
            if value is not None and value not in names:
                raise ValueError(
                    f"selection.{field_name}: {value!r} is not an objective; objectives: {', '.join(names)}"
                )
        if self.selection.rule == "best_of" and self.selection.metric is None:
            self.selection.metric = names[0]
        return self

    @property
    def directions(self) -> list[Direction]:
        return [o.direction for o in self.objectives]

    @property
    def objective_names(self) -> list[str]:
        return [o.metric for o in self.objectives]

    def thresholds(self) -> list[Threshold]:
        found: list[Threshold | None] = [s.bound for s in self.slos]
        if self.goodput is not None:
            found += [self.goodput.ttft_ms, self.goodput.tpot_ms, self.goodput.e2el_ms]
        return [t for t in found if t is not None]

    def needs_calibration(self) -> bool:
        return self.workload.arrival.capacity_fraction is not None or any(
            isinstance(t, RelativeThreshold) for t in self.thresholds()
        )


# Throughput metrics and what measures each where an open loop's cannot: below saturation an open
# loop's throughput is its offered load, whatever the config.
OPEN_LOOP_THROUGHPUT = {
    "request_throughput": SLO_CAPACITY_RPS,
    "output_throughput": "slo_capacity_output_throughput",
    "total_token_throughput": "slo_capacity_total_token_throughput",
    "goodput": "slo_capacity_goodput",
}


def flat_objective_warnings(sc: Scenario) -> list[str]:
    """One line per objective the scenario's own load cannot move: a throughput read at a fixed
    open-loop rate (measured: 5 configs read 71.3-74.3 tok/s at 0.77 req/s offered while their
    TTFT p90 spanned 2.0-23.6 s). Warnings, not errors: a rate past saturation does move it."""
    if sc.workload.arrival.mode == "closed":
        return []
    out = []
    for i, o in enumerate(sc.objectives):
        name = MetricName.parse(o.metric)
        instead = OPEN_LOOP_THROUGHPUT.get(name.base)
        if instead is None:
            continue
        how = "" if sc.capacity is not None else " with a capacity: section"
        out.append(
            f"objectives.{i}: {o.metric} at a fixed open-loop rate ({sc.workload.arrival.mode} arrivals) "
            f"reads the offered load, whatever the config, until the server saturates: it cannot tell "
            f"configs apart. {instead}{how} measures it (the highest rate within the SLOs), "
            f"or a closed loop (arrival mode: closed)"
        )
    return out
