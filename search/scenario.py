"""Scenario files (`configs/*.yaml`): workload, SLOs, objectives, search space, baselines.

Validated on load with pydantic; every error names the file, the field and what is allowed,
before any server starts. Loads and SLO thresholds may be stated relative to what the study
measures once on the vLLM-defaults baseline (`calibration`), so one file means the same thing
on the CPU default model and on an H100.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from loadgen import GoodputSLO, MetricName, WorkloadSpec
from objectives.capacity import CAPACITY_KEYS
from objectives.scoring import ObjectiveSpec, SLOSpec, validate_metric_names
from objectives.stages import CapacitySpec, stage_slos
from serving import DEFAULT_STARTUP_TIMEOUT_S, REGISTRY, scenario_flag_problem

# The shipped scenarios: configs/ in a checkout, where search/scenarios links to it; in an installed
# package (pip install without -e, a container image), the copy that the link became.
CONFIG_DIR = (Path(__file__).resolve().parent / "scenarios").resolve()


class ScenarioError(ValueError):
    pass


# Scenario and study names become directories under the runs directory: one path component
# that cannot be '.', '..' or hidden.
SAFE_NAME_RULE = "use letters, digits, '_', '-', '.' only, starting with a letter, digit or '_'"


def is_safe_name(name: str) -> bool:
    return re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name) is not None


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RelativeThreshold(Strict):
    """A latency bound as a multiple of the same metric's median on an idle baseline server."""

    x_unloaded: float = Field(gt=0)


Threshold = float | RelativeThreshold


def unloaded_reference(metric: str) -> str | None:
    """The calibration metric a relative bound multiplies: the median of the same family/class."""
    name = MetricName.parse(metric)
    if name.statistic not in ("mean", "median") and name.quantile is None:
        return None
    return str(MetricName(f"{name.family}_median_ms", name.cls))


def _relative_only_on_latency(slo: SLOSpec[Threshold]) -> SLOSpec[Threshold]:
    if isinstance(slo.bound, RelativeThreshold) and unloaded_reference(slo.metric) is None:
        raise ValueError(
            f"{slo.metric}: x_unloaded applies to latency metrics (ttft/tpot/itl/e2el_<stat>_ms) only; give a number"
        )
    return slo


# The scoring's SLO and goodput types, with bounds that may be relative (calibration.resolve
# turns them into the plain, numeric ones).
SLO = Annotated[SLOSpec[Threshold], AfterValidator(_relative_only_on_latency)]
DEFAULT_ERROR_RATE_MAX = 0.01  # every study's bound on error_rate unless its scenario sets one
Goodput = GoodputSLO[Threshold]


class Selection(Strict):
    """How "the best" config is picked from the feasible Pareto front.

    best_of: the best value of `metric`; among those within `tolerance` (relative) of it,
    the best of `then`. knee: the member closest to the ideal point in objective space
    normalized to the front's range.
    """

    rule: Literal["best_of", "knee"] = "best_of"
    metric: str | None = None
    tolerance: float = Field(default=0.0, ge=0, lt=1)
    then: str | None = None

    def describe(self) -> str:
        """What `pareto.select` does with this rule, in words: the tolerance widens the best of
        `metric`, and `then` picks among the configurations inside it (without `then` the
        tolerance changes nothing)."""
        if self.rule == "knee":
            return (
                "the knee of the front: the configuration closest to the ideal point, each "
                "objective scaled to the front's range"
            )
        metric = self.metric or "the first objective"
        if self.then is None:
            return f"the best {metric}"
        if self.tolerance == 0:
            return f"the best {metric}, ties broken by the best {self.then}"
        return f"the best {self.then} among the configurations within {self.tolerance * 100:g}% of the best {metric}"


class Domain(Strict):
    """A search range: low/high (log, step) for numbers, or an explicit list of choices."""

    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: list[Any] | None = None

    @model_validator(mode="after")
    def _shape(self) -> Domain:
        if self.choices is not None:
            if self.low is not None or self.high is not None:
                raise ValueError("give either choices or low/high, not both")
            if not self.choices:
                raise ValueError("choices must not be empty")
        elif self.low is None or self.high is None:
            raise ValueError("give low and high, or choices")
        elif self.low > self.high:
            raise ValueError(f"low ({self.low}) is greater than high ({self.high})")
        elif self.log and self.low <= 0:
            raise ValueError("a log range needs low > 0")
        return self


class Calibration(Strict):
    """Measured once per study on the vLLM-defaults baseline, then stored with the study."""

    unloaded_requests: int = Field(default=6, ge=1)
    saturation_concurrency: int = Field(default=32, ge=1)
    saturation_requests: int = Field(default=64, ge=1)
    # Rounds of both measurements on the one server; the medians are the reference. One closed-loop
    # run measured the capacity of mixed at 3.98 then 3.56 req/s: loads 11% apart.
    repeats: int = Field(default=3, ge=1)


class Screening(Strict):
    """A cheaper measurement for the search phase (multi-fidelity): trials are screened short and
    the confirmation phase re-measures the front in full. Unset fields: as the full measurement."""

    duration_s: float | None = Field(default=None, gt=0)  # the target stage's sending window
    num_requests: int | None = Field(default=None, ge=1)  # for workloads sized in requests
    max_stages: int | None = Field(default=None, ge=1)  # capacity stages after the target


class Confirmation(Strict):
    """The end of a study: the chosen configuration, the next best members of the feasible front
    and every baseline, each re-measured `runs` times on fresh server starts, interleaved
    (A B C A B C ...); the verdict and best.yaml come from these runs (`search.study.verdict`)."""

    runs: int = Field(default=3, ge=0)  # per candidate; 0: no phase, the single measurements decide
    front: int = Field(default=2, ge=1)  # feasible front members, the chosen one first


class ServerSection(Strict):
    fixed: dict[str, Any] = Field(default_factory=dict)  # held for every trial, baselines included
    startup_timeout_s: float = Field(default=DEFAULT_STARTUP_TIMEOUT_S, gt=0)

    @field_validator("fixed")
    @classmethod
    def _allowed_flags(cls, v: dict[str, Any]) -> dict[str, Any]:
        if (problem := scenario_flag_problem(v)) is not None:
            raise ValueError(problem)
        return v


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
    def _metric_names(self) -> Scenario:
        fields = [(f"objectives.{i}.metric", o.metric) for i, o in enumerate(self.objectives)]
        fields += [(f"slos.{i}.metric", s.metric) for i, s in enumerate(self.slos)]
        for where, metric in fields:
            try:
                validate_metric_names([metric], self.workload.class_names)
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from None
        return self

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
    def directions(self) -> list[str]:
        return [o.direction for o in self.objectives]

    @property
    def objective_names(self) -> list[str]:
        return [o.metric for o in self.objectives]

    def thresholds(self) -> list[Threshold]:
        found = [s.bound for s in self.slos]
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
    "request_throughput": "slo_capacity_rps",
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


def _format_error(path: str, err: ValidationError) -> str:
    lines = [f"{path}: invalid scenario"]
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"] if not str(x).startswith("function-after"))
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        elif e["type"] == "literal_error":
            msg = f"{msg} (got {e.get('input')!r})"
        lines.append(f"  {loc}: {msg}" if loc else f"  {msg}")  # a model check names its field itself
    return "\n".join(lines)


def resolve_path(name_or_path: str | Path) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.exists():
            raise ScenarioError(f"{p}: no such scenario file")
        return p
    candidate = CONFIG_DIR / f"{name_or_path}.yaml"
    if not candidate.exists():
        known = sorted(f.stem for f in CONFIG_DIR.glob("*.yaml"))
        raise ScenarioError(
            f"unknown scenario {name_or_path!r}; built-in scenarios: "
            f"{', '.join(known)} (or pass a path to your own YAML file)"
        )
    return candidate


def load(name_or_path: str | Path) -> tuple[Scenario, str, str]:
    """(scenario, source text, path shown in messages). Raises ScenarioError."""
    path = resolve_path(name_or_path)
    shown = str(path.relative_to(CONFIG_DIR.parent)) if path.is_relative_to(CONFIG_DIR.parent) else str(path)
    text = path.read_text()
    return parse(text, shown, path.parent.resolve()), text, shown


def _yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's error on one line: where (1-based line and column) and what, without its
    multi-line excerpt of the file."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None)
    if mark is None or problem is None:
        return " ".join(str(e).split())
    context, at = getattr(e, "context", None), getattr(e, "context_mark", None)
    context = (
        (f" ({context}" + (f" at line {at.line + 1}, column {at.column + 1}" if at else "") + ")") if context else ""
    )
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}{context}"


def read_mapping(text: str, shown: str) -> dict:
    """A YAML file's top-level mapping (a scenario, a workload file); ScenarioError, one line
    beginning with `shown`, for anything else."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ScenarioError(f"{shown}: not valid YAML: {_yaml_problem(e)}") from e
    if not isinstance(data, dict):
        raise ScenarioError(f"{shown}: expected a mapping at the top level")
    return data


def parse(text: str, shown: str, base_dir: Path) -> Scenario:
    """A scenario's source text, validated; errors begin with `shown` (the file, or where the text
    is stored). Relative workload files are read from `base_dir`. Raises ScenarioError."""
    data = read_mapping(text, shown)
    try:
        return Scenario.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as e:
        raise ScenarioError(_format_error(shown, e)) from None


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
