"""What a scenario asks of the server for one load run (`WorkloadSpec`): the endpoint, the request
classes (`request_class`, with their `lengths`), the arrivals (`arrival_spec`), bounds and seed.

These models validate scenario YAML (`extra="forbid"`: a misspelt key is an error naming the
field). Relative file paths (`file`, `sharegpt`) resolve against the YAML file's directory
when loaded with `WorkloadSpec.from_yaml`, against the working directory otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from loadgen.arrival_spec import ArrivalSpec
from loadgen.request_class import RequestClass

Endpoint = Literal["chat", "completions"]


_CLASS_SHORTHAND = ("prompt_tokens", "output_tokens", "shared_prefix", "sharegpt")


class WorkloadSpec(BaseModel):
    """One load run. Single-class shorthand: put prompt_tokens/output_tokens/... at top level."""

    model_config = ConfigDict(extra="forbid")

    endpoint: Endpoint = "completions"
    classes: list[RequestClass] = Field(..., min_length=1)
    arrival: ArrivalSpec
    num_requests: int | None = Field(None, ge=1, description="measured requests (excl. warmup)")
    duration_s: float | None = Field(None, gt=0, description="stop sending after this long")
    warmup_requests: int = Field(0, ge=0, description="sent first, excluded from the metrics")
    seed: int = Field(0, ge=0)
    request_timeout_s: float = Field(300.0, gt=0)
    temperature: float | None = Field(0.0, ge=0, description="sent with every request; null: server default")

    @model_validator(mode="before")
    @classmethod
    def _single_class(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        short = {k: data[k] for k in _CLASS_SHORTHAND if k in data}
        if not short:
            return data
        if "classes" in data:
            raise ValueError(f"give either classes or the single-class shorthand ({', '.join(short)}), not both")
        rest = {k: v for k, v in data.items() if k not in short}
        return {**rest, "classes": [{"name": "default", **short}]}

    @model_validator(mode="after")
    def _check(self) -> WorkloadSpec:
        names = [c.name for c in self.classes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"class names must be unique; repeated: {', '.join(dupes)}")
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("give num_requests, duration_s, or both")
        return self

    @classmethod
    def from_yaml(cls, path: str | Path) -> WorkloadSpec:
        import yaml

        path = Path(path)
        data = yaml.safe_load(path.read_text())
        return cls.model_validate(data, context={"base_dir": path.parent.resolve()})

    @property
    def class_names(self) -> list[str]:
        return [c.name for c in self.classes]

    def longest_request_tokens(self) -> int:
        """The largest prompt + output any request of this workload can have."""
        return max(c.longest_request_tokens(self.endpoint) for c in self.classes)

    def expected_requests(self, class_name: str | None = None) -> float | None:
        """About how many measured requests one run has (of `class_name`, by its weight): the
        count a percentile over this run rests on. None: an open loop without a resolved rate."""
        rate = self.arrival.mean_rate()
        if self.num_requests is not None:
            n = float(self.num_requests)
            if self.duration_s is not None and rate is not None:
                n = min(n, rate * self.duration_s)
        elif rate is not None:
            n = rate * self.duration_s
        else:
            return None
        if class_name is None:
            return n
        total = sum(c.weight for c in self.classes)
        return n * next(c.weight for c in self.classes if c.name == class_name) / total
