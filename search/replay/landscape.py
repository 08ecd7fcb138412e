"""A recorded landscape: configurations of one scenario's space, each measured one or more times
with the search's screening measurement, and how the numbers were obtained.

The file format (JSON) is what `python -m benchmarks.bench_landscape export` writes and what the replay
executor's surrogate is fitted on. A synthetic landscape (`search.replay.synthetic`) has the same
format and says so in `synthetic`.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from objectives.capacity import SLO_CAPACITY_RPS

SCHEMA = 1
CAPACITY = SLO_CAPACITY_RPS  # the capacity metric a landscape records per measurement


class LandscapeError(ValueError):
    """A landscape file that cannot be read: missing, not JSON, or not in this format."""


@dataclass
class ScreenedRun:
    """One screening measurement of one configuration."""

    run: int  # 1: the first pass; 2, 3: the repeats
    served: bool  # False: the server never served (failure_class says why)
    failure_class: str | None = None
    values: list[float] | None = None  # the objective vector, in the landscape's objective order
    metrics: dict[str, float] = field(default_factory=dict)  # the objectives' and the SLOs' metrics
    constraints: dict[str, float] = field(default_factory=dict)  # <= 0: met
    feasible: bool = False
    capacity_low: float | None = None  # the highest rate that met the SLOs (None: none did)
    capacity_high: float | None = None  # the lowest rate that missed them (None: none did: censored)
    # The capacity fitted on every stage's counts (`objectives.capacity_fit.fit_capacity`) and its interval
    # (high None: censored); None in a landscape recorded before the fit.
    capacity: float | None = None
    capacity_fit_low: float | None = None
    capacity_fit_high: float | None = None
    trial_s: float | None = None  # the whole trial: start, load stages, stop
    start_s: float | None = None  # the server's start alone
    started_at: str | None = None

    def capacity_point(self) -> float | None:
        """The capacity this measurement says: the fit's, where it was recorded; before, where the
        capacity sits in its bracket on a log scale: the geometric middle, a censored bracket (never
        violated) or an empty one (never met) giving its one end."""
        if self.capacity is not None and self.capacity_fit_low is not None:
            return self.capacity
        lo, hi = self.capacity_low, self.capacity_high
        if lo and hi:
            return math.sqrt(lo * hi)
        return lo if lo else (hi / 2 if hi else None)

    def capacity_ratio(self) -> float | None:
        """How wide this measurement leaves the capacity, high / low: the fit's interval where it
        was recorded, else the bracket (None: open at either end)."""
        if self.capacity_fit_low and self.capacity_fit_high:
            return self.capacity_fit_high / self.capacity_fit_low
        if self.capacity_fit_low is None and self.capacity_low and self.capacity_high:
            return self.capacity_high / self.capacity_low
        return None


@dataclass
class Config:
    params: dict[str, Any]  # as Optuna sampled them (a baseline: those its space can represent)
    config: dict[str, Any]  # as asked for: fixed values, then the sampled or the baseline's
    baseline: str | None = None
    measurements: list[ScreenedRun] = field(default_factory=list)


@dataclass(frozen=True)
class RepeatSummary:
    """A landscape's repeat table: how far one configuration's screenings agree with each other."""

    configs: int  # served configurations measured more than once
    feasibility_agree: int  # of those, how many got the same feasibility call every time
    capacity_cv: float  # the repeats' capacity CV over their feasible runs, root mean square over configurations
    interval_ratio: float  # a measurement's capacity interval (fit) or bracket, high / low, median
    trial_s: float  # median seconds a trial took
    server_starts: int
    wall_s: float | None

    def line(self, name: str) -> str:
        share = self.feasibility_agree / self.configs if self.configs else math.nan
        wall = f", {self.wall_s / 60:.0f} min" if self.wall_s else ""
        return (
            f"{name}: feasibility agrees across repeats on {self.feasibility_agree} of {self.configs} "
            f"configs ({share:.0%}); capacity repeat CV {self.capacity_cv:.0%}; interval {self.interval_ratio:.2f}x; "
            f"{self.trial_s:.0f} s a trial; {self.server_starts} server starts{wall}"
        )


@dataclass
class Landscape:
    scenario: str
    objectives: list[dict[str, str]]  # [{"metric", "direction"}] in the study's order
    slos: list[str]  # the SLO metrics (the constraints' names)
    space: dict[str, dict[str, Any]]  # the scenario's search space, as its file states it
    defaults: dict[str, Any]  # what the server applies for a space parameter a config leaves unset
    calibration: dict[str, Any]  # the study's calibration (`CalibrationResult.as_dict()`)
    configs: list[Config]
    provenance: dict[str, Any] = field(default_factory=dict)
    synthetic: bool = False
    scenario_source: str = ""  # the scenario file the study ran, for one that is not built in
    schema: int = SCHEMA

    @property
    def metric_names(self) -> list[str]:
        return [o["metric"] for o in self.objectives]

    def replayable_source(self) -> str:
        """The recorded scenario as this build reads it. A landscape recorded while stages were
        sized in seconds names `capacity.stage_s` (and `max_stage_s`), which a scenario no longer
        takes: a replay reads the objectives, SLOs and space, never the stages, so they are dropped."""
        data = yaml.safe_load(self.scenario_source)
        capacity = data.get("capacity") if isinstance(data, dict) else None
        if not isinstance(capacity, dict) or not {"stage_s", "max_stage_s"} & set(capacity):
            return self.scenario_source
        for gone in ("stage_s", "max_stage_s"):
            capacity.pop(gone, None)
        return yaml.safe_dump(data, sort_keys=False)

    @property
    def directions(self) -> list[str]:
        return [o["direction"] for o in self.objectives]

    def effective(self, config: dict[str, Any]) -> dict[str, Any]:
        """Every space parameter as the server runs it: the config's value, else the default."""
        return {k: config.get(k, self.defaults.get(k)) for k in self.space}

    def measurements(self) -> list[tuple[Config, ScreenedRun]]:
        return [(c, m) for c in self.configs for m in c.measurements]

    def typical_trial_s(self) -> tuple[float, float]:
        """(median trial seconds, median start seconds) over the served measurements."""
        served = [(m.trial_s, m.start_s or 0.0) for _, m in self.measurements() if m.served and m.trial_s is not None]
        if not served:
            return 0.0, 0.0
        return (
            float(statistics.median(trial_s for trial_s, _ in served)),
            float(statistics.median(start_s for _, start_s in served)),
        )

    def repeats(self) -> RepeatSummary:
        """How a configuration's repeats agree (the served configurations measured more than once)."""
        repeated = [c for c in self.configs if sum(m.served for m in c.measurements) > 1]
        agree, cvs = 0, []
        for c in repeated:
            served = [m for m in c.measurements if m.served]
            agree += len({m.feasible for m in served}) == 1
            # Feasible runs only: a flip shows in the agreement, and an infeasible run's capacity
            # is censored below the target (a stand-in for ranking), not a measured spread.
            caps = [v for m in served if m.feasible and (v := m.capacity_point()) is not None and v > 0]
            if len(caps) > 1:
                cvs.append(statistics.stdev(caps) / statistics.fmean(caps))
        widths = [r for _, m in self.measurements() if m.served and (r := m.capacity_ratio()) is not None]
        trial_s = [m.trial_s for _, m in self.measurements() if m.served and m.trial_s is not None]
        return RepeatSummary(
            configs=len(repeated),
            feasibility_agree=agree,
            capacity_cv=math.sqrt(statistics.fmean(v * v for v in cvs)) if cvs else math.nan,
            interval_ratio=statistics.median(widths) if widths else math.nan,
            trial_s=statistics.median(trial_s) if trial_s else math.nan,
            server_starts=int(self.provenance.get("server_starts") or len(self.measurements())),
            wall_s=self.provenance.get("wall_s"),
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=False, default=str)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json() + "\n")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Landscape:
        if d.get("schema") != SCHEMA:
            raise LandscapeError(f"not a landscape file: schema {d.get('schema')!r}, expected {SCHEMA}")
        configs = [
            Config(c["params"], c["config"], c.get("baseline"), [ScreenedRun(**m) for m in c["measurements"]])
            for c in d["configs"]
        ]
        return cls(**{**d, "configs": configs})

    @classmethod
    def load(cls, path: Path) -> Landscape:
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except LandscapeError as e:
            raise LandscapeError(f"{path}: {e}") from None
        except OSError as e:
            raise LandscapeError(f"{path}: {e.strerror.lower() if e.strerror else e}") from None
        except (ValueError, KeyError, TypeError) as e:  # not JSON, or not a landscape
            raise LandscapeError(f"{path}: not a landscape file ({e.__class__.__name__}: {e})") from None
