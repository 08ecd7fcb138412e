"""What a scenario asks of the server for one load run (`WorkloadSpec`): the endpoint, the request
classes (`request_class`, with their length distributions), a trace (`trace`) or multi-turn sessions
(`sessions`), the arrivals (`ArrivalSpec`) and the schedule they give (`open_loop_offsets`), bounds
and seed.

These models validate scenario YAML (`extra="forbid"`: a misspelt key is an error naming the
field). Relative file paths (`file`, `sharegpt`, `trace.file`) resolve against the YAML file's
directory when loaded with `WorkloadSpec.from_yaml`, against the working directory otherwise.

A trace workload's requests come from the trace: its classes are the trace's (one, `default`,
unless its JSONL names classes), made here from the trace's own lengths and prefixes so that
whatever reads a workload's classes (the calibration, the diagnosis) reads the trace's; they are
not written back when the spec is dumped. Restricting `classes` (a calibration measures one class
at a time) replays only the trace's requests of those classes.

**Arrivals**: when requests are sent. `ArrivalSpec` is an open loop at a rate (Poisson, gamma,
constant, bursts) or a closed loop of concurrent users; a rate may be a fraction of measured
capacity until the study resolves it.

Open-loop arrival schedules (`open_loop_offsets`): seconds after the run's start at which each
request is due. Pure and precomputed before the run, so the dispatcher only sleeps. Gamma/Poisson gaps follow
`vllm bench serve` exactly: gaps drawn from numpy's legacy global-style generator seeded with
the workload seed (`np.random.seed(seed)` there), the first request due after one gap,
cumulated, and rescaled so the last arrival lands at N/rate, so the same seed gives the same
schedule in both tools.

A duration bound is turned into a count the same way: N = rate x duration arrivals (rounded
down), rescaled, so every window offers exactly its nominal rate. Bursty gaps left unrescaled
make the offered load itself random, and the more so the shorter the window: on `mixed`
(gamma, burstiness 0.5, 0.69 req/s) the same seed gave 13 requests in a 25 s window (0.52
req/s) and 41 in a 45 s one (0.91 req/s), so a screened trial and a full run of the same config
measured different loads, and the full runs all missed an SLO that the screened ones met.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from loadgen.request_class import LengthDist, RequestClass, SharedPrefix
from loadgen.sessions import SessionSpec
from loadgen.trace import Trace, TraceSpec, replay_offsets

# -- the arrivals: when requests are sent -----------------------------------------------

ArrivalMode = Literal["poisson", "gamma", "constant", "burst", "trace", "closed"]


class UnresolvedRateError(ValueError):
    """A rate given as a fraction of capacity that was never turned into requests/s."""


class ArrivalSpec(BaseModel):
    """When requests are sent.

    Open loop (`poisson`, `gamma`, `constant`, `burst`, `trace`): at `rate` requests/s, whatever the
    server does. `gamma` gaps have shape `burstiness` (1 = Poisson, < 1 burstier, > 1
    smoother), as `vllm bench serve --burstiness`. `burst`: Poisson at `rate`, with
    `peak_multiplier` x `rate` for the first `duty` of every `period_s`. `trace`: the gaps of
    the workload's trace, scaled so that their mean rate is `rate` (`loadgen.trace.replay_plan`).
    Closed loop (`closed`): `concurrency` users, each sending its next request when the last
    one finished.
    A rate may be given as `capacity_fraction` of measured capacity instead; the study turns
    it into `rate` with `resolve()` before a run.
    """

    model_config = ConfigDict(extra="forbid")

    mode: ArrivalMode = "poisson"
    rate: float | None = Field(None, gt=0, description="requests/s (burst: the baseline)")
    capacity_fraction: float | None = Field(None, gt=0, description="rate as a fraction of capacity")
    burstiness: float = Field(1.0, gt=0, description="gamma: shape of the gaps")
    peak_multiplier: float = Field(4.0, gt=1, description="burst: peak rate / baseline rate")
    period_s: float = Field(10.0, gt=0, description="burst: one baseline+peak cycle")
    duty: float = Field(0.2, gt=0, lt=1, description="burst: share of each period at the peak")
    concurrency: int | None = Field(None, ge=1, description="closed: number of users")

    @model_validator(mode="after")
    def _check(self) -> ArrivalSpec:
        if self.mode == "closed":
            if self.concurrency is None:
                raise ValueError("mode=closed needs concurrency")
            bad = [f for f in ("rate", "capacity_fraction") if getattr(self, f) is not None]
            if bad:
                raise ValueError(f"mode=closed takes concurrency, not {', '.join(bad)}")
        else:
            if (self.rate is None) == (self.capacity_fraction is None):
                raise ValueError(f"mode={self.mode} needs exactly one of rate, capacity_fraction")
            if self.concurrency is not None:
                raise ValueError(f"concurrency applies to mode=closed only (mode={self.mode})")
        # Compared with the defaults, not with what was given, so a dumped spec validates again.
        defaults = type(self).model_fields
        if self.burstiness != defaults["burstiness"].default and self.mode != "gamma":
            raise ValueError(f"burstiness applies to mode=gamma only (mode={self.mode})")
        burst_fields = [f for f in ("peak_multiplier", "period_s", "duty") if getattr(self, f) != defaults[f].default]
        if burst_fields and self.mode != "burst":
            raise ValueError(f"{', '.join(burst_fields)} apply to mode=burst only (mode={self.mode})")
        return self

    @property
    def is_resolved(self) -> bool:
        return self.mode == "closed" or self.rate is not None

    def resolve(self, capacity_rps: float) -> ArrivalSpec:
        """This spec with `capacity_fraction` turned into `rate` (unchanged if already a rate)."""
        if self.capacity_fraction is None:
            return self.model_copy()
        if not capacity_rps > 0:
            raise ValueError(f"capacity must be > 0 requests/s, got {capacity_rps}")
        data = self.model_dump(exclude_unset=True)
        data.pop("capacity_fraction", None)
        data["rate"] = self.capacity_fraction * capacity_rps
        return ArrivalSpec(**data)

    def require_resolved(self) -> None:
        if not self.is_resolved:
            raise UnresolvedRateError(
                f"arrival rate is capacity_fraction={self.capacity_fraction} of a capacity that "
                "was not measured; call ArrivalSpec.resolve(capacity_rps) (the study does) or "
                "give rate in requests/s"
            )

    def resolved_rate(self) -> float:
        """`rate` of an open loop, in requests/s: raises where it is a capacity fraction not yet
        resolved, or where there is none (a closed loop)."""
        self.require_resolved()
        if self.rate is None:
            raise ValueError(f"mode={self.mode} has no rate: it is a closed loop of {self.concurrency} users")
        return self.rate

    def users(self) -> int:
        """A closed loop's concurrent users: raises for an open loop, which has none."""
        if self.concurrency is None:
            raise ValueError(f"mode={self.mode} has no users: it is an open loop")
        return self.concurrency

    def mean_rate(self) -> float | None:
        """Long-run requests/s of an open loop (None for closed loop or unresolved)."""
        if self.rate is None:
            return None
        return self.resolved_mean_rate()

    def resolved_mean_rate(self) -> float:
        """`mean_rate()` of an open loop whose rate is known: raises as `resolved_rate` does."""
        rate = self.resolved_rate()
        if self.mode == "burst":
            return rate * (1 - self.duty + self.duty * self.peak_multiplier)
        return rate


def _need(duration_s: float, rate: float) -> int:
    """Draws for a schedule that is trimmed to `duration_s` afterwards (constant and bursts)."""
    # Enough draws that the duration is covered with overwhelming probability; trimmed below.
    mean = duration_s * rate
    return int(mean + 10 * math.sqrt(mean) + 100)


def gamma_offsets(n: int, rate: float, shape: float, seed: int, rescale: bool = True) -> np.ndarray:
    rng = np.random.RandomState(seed)
    gaps = rng.gamma(shape=shape, scale=1.0 / (rate * shape), size=n)
    offsets = np.cumsum(gaps)
    if rescale and offsets[-1] > 0:
        offsets *= (n / rate) / offsets[-1]
    return offsets


def constant_offsets(n: int, rate: float) -> np.ndarray:
    return np.arange(1, n + 1, dtype=float) / rate


def burst_offsets(n: int, rate: float, peak_multiplier: float, period_s: float, duty: float, seed: int) -> np.ndarray:
    """Poisson with a periodic rate: `peak_multiplier * rate` for the first `duty` of each period.

    Time-rescaling: unit-rate exponential arrivals mapped through the inverse of the cumulative
    intensity, which is piecewise linear.
    """
    rng = np.random.default_rng([seed, 7])
    unit = np.cumsum(rng.exponential(1.0, size=n))
    peak, base = rate * peak_multiplier, rate
    t_peak = duty * period_s
    per_period = peak * t_peak + base * (period_s - t_peak)
    periods, rest = np.divmod(unit, per_period)
    in_peak = rest <= peak * t_peak
    within = np.where(in_peak, rest / peak, t_peak + (rest - peak * t_peak) / base)
    return periods * period_s + within


def slice_seed(seed: int, first: int) -> int:
    """The arrival process's seed for a run whose requests start at `first` in the workload's
    sequence: the workload's own from the start (so a plain run's schedule is `vllm bench
    serve`'s for the same seed), one drawn from both for any later slice, so that each load stage
    has bursts of its own, the same in every trial."""
    if first == 0:
        return seed
    return int(np.random.SeedSequence([int(seed), int(first)]).generate_state(1)[0])


def open_loop_offsets(
    arrival: ArrivalSpec,
    n: int | None,
    duration_s: float | None,
    seed: int,
    trace: Trace | None = None,
    first: int = 0,
) -> np.ndarray:
    """Due times (s from the start) of an open-loop run, bounded by n and/or duration_s; mode `trace`
    replays `trace`'s gaps (the workload's `replayed_trace()`) from its request `first` on,
    rescaled as the gamma gaps are. `first`: the run's first request in the workload's sequence."""
    if arrival.mode == "closed":
        raise ValueError("a closed loop has no precomputed schedule")
    rate = arrival.resolved_rate()
    if n is not None:
        count = n
    elif duration_s is None:
        raise ValueError("give num_requests, duration_s, or both")
    elif arrival.mode in ("poisson", "gamma", "trace"):
        count = max(1, math.floor(rate * duration_s + 1e-9))  # what the duration holds at the rate
    else:
        count = _need(duration_s, arrival.resolved_mean_rate())
    drawn = slice_seed(seed, first)  # the gaps' seed; a trace's window starts where the workload's does
    if arrival.mode in ("poisson", "gamma"):
        shape = arrival.burstiness if arrival.mode == "gamma" else 1.0
        offsets = gamma_offsets(count, rate, shape, drawn)
    elif arrival.mode == "trace":
        if trace is None:
            raise ValueError("arrival mode=trace needs the workload's trace")
        offsets = replay_offsets(trace, seed, count, rate, first)
    elif arrival.mode == "constant":
        offsets = constant_offsets(count, rate)
    else:
        offsets = burst_offsets(count, rate, arrival.peak_multiplier, arrival.period_s, arrival.duty, drawn)
    if duration_s is not None:
        offsets = offsets[offsets <= duration_s]
    return offsets


# -- the workload ---------------------------------------------------------------------

Endpoint = Literal["chat", "completions"]

_CLASS_SHORTHAND = ("prompt_tokens", "output_tokens", "shared_prefix", "sharegpt")


def trace_classes(spec: TraceSpec) -> list[RequestClass]:
    """The trace's classes: weight by count, lengths as the trace has them, prefix as it shares one."""
    trace = spec.trace
    out = []
    for i, name in enumerate(trace.class_names):
        rows = trace.class_index == i
        prefix = spec.prefix_summary(name)
        out.append(
            RequestClass.model_construct(
                name=name,
                weight=float(rows.mean()),
                prompt_tokens=LengthDist.observed(trace.prompt_tokens[rows], spec.file),
                output_tokens=LengthDist.observed(trace.output_tokens[rows], spec.file),
                shared_prefix=(
                    SharedPrefix.model_construct(fraction=prefix[0], tokens=prefix[1], count=prefix[2])
                    if prefix
                    else None
                ),
                sharegpt=None,
            )
        )
    return out


class WorkloadSpec(BaseModel):
    """One load run. Single-class shorthand: put prompt_tokens/output_tokens/... at top level."""

    model_config = ConfigDict(extra="forbid")

    endpoint: Endpoint = "completions"
    classes: list[RequestClass] = Field(default_factory=list, description="at least one, unless a trace")
    trace: TraceSpec | None = Field(None, description="requests from a trace file (docs/traces.md)")
    sessions: SessionSpec | None = Field(
        None,
        description=(
            "multi-turn conversations instead of independent requests (chat endpoint). The workload "
            "is still counted in requests, a session's turns: num_requests, warmup_requests and the "
            "arrival rate are turns, and sessions start at the rate over the mean turns per session"
        ),
    )
    arrival: ArrivalSpec
    num_requests: int | None = Field(None, ge=1, description="measured requests (excl. warmup)")
    duration_s: float | None = Field(None, gt=0, description="stop sending after this long")
    warmup_requests: int = Field(0, ge=0, description="sent first, excluded from the metrics")
    seed: int = Field(0, ge=0)
    first_request: int = Field(
        0,
        ge=0,
        description=(
            "the run's first measured request in the workload's seeded sequence (a study's load "
            "stages each take their own slice of it)"
        ),
    )
    request_timeout_s: float = Field(300.0, gt=0)
    temperature: float | None = Field(0.0, ge=0, description="sent with every request; null: server default")

    @model_validator(mode="before")
    @classmethod
    def _single_class(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        short = {k: data[k] for k in _CLASS_SHORTHAND if k in data}
        given = ", ".join([*short, *(["classes"] if "classes" in data else [])])
        if data.get("trace") is not None and given:
            raise ValueError(f"a trace gives the requests' lengths and prefixes: remove {given}")
        if data.get("sessions") is not None and given:
            raise ValueError(f"sessions give each turn's lengths and name its class: remove {given}")
        if not short:
            return data
        if "classes" in data:
            raise ValueError(f"give either classes or the single-class shorthand ({', '.join(short)}), not both")
        rest = {k: v for k, v in data.items() if k not in short}
        return {**rest, "classes": [{"name": "default", **short}]}

    @model_validator(mode="after")
    def _check(self) -> WorkloadSpec:
        if self.sessions is not None:
            if self.trace is not None:
                raise ValueError("give either sessions or a trace, not both")
            if self.endpoint != "chat":
                raise ValueError("sessions resend the conversation in the chat template: set endpoint: chat")
            self.classes = self.sessions.request_classes()
        elif self.trace is not None:
            self.classes = trace_classes(self.trace)
        elif not self.classes:
            raise ValueError("classes: give at least one request class (or a trace)")
        if self.arrival.mode == "trace" and self.trace is None:
            raise ValueError("arrival mode=trace replays the workload's trace: give trace: {file: ...}")
        names = [c.name for c in self.classes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"class names must be unique; repeated: {', '.join(dupes)}")
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("give num_requests, duration_s, or both")
        return self

    @model_serializer(mode="wrap")
    def _without_trace_classes(self, handler: Any) -> Any:
        data = handler(self)
        if (self.trace is not None or self.sessions is not None) and isinstance(data, dict):
            data.pop("classes", None)  # the trace's or the turns': validating the dump makes them again
        return data

    @classmethod
    def from_yaml(cls, path: str | Path) -> WorkloadSpec:
        import yaml

        path = Path(path)
        data = yaml.safe_load(path.read_text())
        return cls.model_validate(data, context={"base_dir": path.parent.resolve()})

    def schedule(self) -> np.ndarray:
        """An open loop's due times (s from the run's start), for its slice of the sequence: of its
        requests, or of its sessions' starts."""
        if self.sessions is not None:
            n = self.sessions_for(self.num_requests) if self.num_requests is not None else None
            return open_loop_offsets(self.session_arrival(), n, self.duration_s, self.seed, None, self.first_request)
        return open_loop_offsets(
            self.arrival, self.num_requests, self.duration_s, self.seed, self.replayed_trace(), self.first_request
        )

    def sessions_for(self, requests: int) -> int:
        """The sessions whose turns make about `requests` requests (at least one)."""
        assert self.sessions is not None
        return max(1, math.ceil(requests / self.sessions.mean_turns() - 1e-9)) if requests > 0 else 0

    def session_arrival(self) -> ArrivalSpec:
        """The arrivals of sessions: the workload's, at its request rate over the mean turns."""
        assert self.sessions is not None
        if self.arrival.mode == "closed" or self.arrival.rate is None:
            return self.arrival
        return self.arrival.model_copy(update={"rate": self.arrival.rate / self.sessions.mean_turns()})

    @property
    def class_names(self) -> list[str]:
        return [c.name for c in self.classes]

    def longest_request_tokens(self) -> int:
        """The largest prompt + output any request of this workload can have."""
        if self.trace is not None:
            return self.trace.longest_request_tokens()
        if self.sessions is not None:
            return self.sessions.longest_request_tokens()
        return max(c.longest_request_tokens(self.endpoint) for c in self.classes)

    def replayed_trace(self) -> Trace | None:
        """The trace's requests this workload sends (of its classes), lengths clipped; None: no trace."""
        if self.trace is None:
            return None
        trace = self.trace.trace
        names = self.class_names
        return trace if list(trace.class_names) == names else trace.of_classes(names)

    def expected_requests(self, class_name: str | None = None) -> float | None:
        """About how many measured requests one run has (of `class_name`, by its weight): the
        count a percentile over this run rests on. None: an open loop without a resolved rate."""
        rate = self.arrival.mean_rate()
        if self.num_requests is not None:
            n = float(self.num_requests)
            if self.duration_s is not None and rate is not None:
                n = min(n, rate * self.duration_s)
        elif rate is not None and self.duration_s is not None:
            n = rate * self.duration_s
        else:
            return None
        if class_name is None:
            return n
        total = sum(c.weight for c in self.classes)
        return n * next(c.weight for c in self.classes if c.name == class_name) / total
