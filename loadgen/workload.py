"""What a scenario asks of the server for one load run (`WorkloadSpec`): the endpoint, the request
classes (`request_class`, with their length distributions), a trace (`trace`) or multi-turn sessions
(`sessions`), the arrivals (`ArrivalSpec`, `arrivals`, with the schedule they give), bounds and
seed.

These models validate scenario YAML (`extra="forbid"`: a misspelt key is an error naming the
field). Relative file paths (`file`, `sharegpt`, `trace.file`) resolve against the YAML file's
directory when loaded with `WorkloadSpec.from_yaml`, against the working directory otherwise.

A trace workload's requests come from the trace: its classes are the trace's (one, `default`,
unless its JSONL names classes), made here from the trace's own lengths and prefixes so that
whatever reads a workload's classes (the calibration, the diagnosis) reads the trace's; they are
not written back when the spec is dumped. Restricting `classes` (a calibration measures one class
at a time) replays only the trace's requests of those classes.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from loadgen.arrivals import ArrivalSpec, open_loop_offsets
from loadgen.length_dist import LengthDist
from loadgen.request_class import RequestClass, SharedPrefix
from loadgen.sessions import SessionSpec
from loadgen.trace import Trace, TraceSpec

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
