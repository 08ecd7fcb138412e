"""What a scenario asks of the server: request classes, their lengths, arrivals, bounds, seed.

These models validate scenario YAML (`extra="forbid"`: a misspelt key is an error naming the
field). Relative file paths (`file`, `sharegpt`) resolve against the YAML file's directory
when loaded with `WorkloadSpec.from_yaml`, against the working directory otherwise.

Lengths count tokens as the server counts them: `prompt_tokens` is the whole prompt (shared
prefix and, on the chat endpoint, the chat template included), `output_tokens` is exact
(`ignore_eos` + `max_tokens`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

DistName = Literal["fixed", "uniform", "normal", "lognormal", "empirical"]
ArrivalMode = Literal["poisson", "gamma", "constant", "burst", "closed"]
Endpoint = Literal["chat", "completions"]

# ShareGPT filters, as `vllm bench serve` applies them (prompt and reference answer lengths).
SHAREGPT_MIN_TOKENS = 4
SHAREGPT_MAX_PROMPT_TOKENS = 1024
SHAREGPT_MAX_TOTAL_TOKENS = 2048
# A ShareGPT chat prompt is its text plus the chat template, whose size we only know with the
# tokenizer; this bounds it for `longest_request_tokens`.
CHAT_TEMPLATE_MARGIN_TOKENS = 64
# Without explicit bounds, normal lengths are clipped at mean +- 5 sd (as guidellm does) and
# lognormal ones at exp(mu +- 5 sigma): a hard bound is needed to check max_model_len.
DEFAULT_SIGMAS = 5.0

_DIST_PARAMS: dict[str, tuple[str, ...]] = {
    "fixed": ("value",),
    "uniform": ("low", "high"),
    "normal": ("mean", "std"),
    "lognormal": ("mean", "std"),
    "empirical": ("file",),
}
_ALL_PARAMS = ("value", "low", "high", "mean", "std", "file")


def _resolve_path(value: Path | str | None, info: ValidationInfo) -> Path | None:
    if value is None:
        return None
    path = Path(value).expanduser()
    base = (info.context or {}).get("base_dir") if info.context else None
    if not path.is_absolute() and base is not None:
        path = Path(base) / path
    return path


def read_empirical_values(path: Path) -> np.ndarray:
    """Lengths from a file: a JSON list (or {"values": [...]}) or one number per line (CSV: first column)."""
    text = Path(path).read_text()
    if path.suffix == ".json":
        data = json.loads(text)
        raw = data["values"] if isinstance(data, dict) else data
        values = [float(v) for v in raw]
    else:
        values = []
        for line in text.splitlines():
            cell = line.split(",")[0].strip()
            if not cell or cell.startswith("#"):
                continue
            try:
                values.append(float(cell))
            except ValueError:
                if values:  # a header is fine, garbage in the middle is not
                    raise ValueError(f"{path}: not a number: {cell!r}") from None
    if not values:
        raise ValueError(f"{path}: no lengths in the file")
    arr = np.rint(np.asarray(values, dtype=float)).astype(np.int64)
    if (arr < 1).any():
        raise ValueError(f"{path}: lengths must be >= 1 (found {int(arr.min())})")
    return arr


class LengthDist(BaseModel):
    """A token-length distribution. A bare integer in YAML means `{dist: fixed, value: N}`."""

    model_config = ConfigDict(extra="forbid")

    dist: DistName = "fixed"
    value: int | None = Field(None, ge=1, description="fixed: the length")
    low: int | None = Field(None, ge=1, description="uniform: smallest length (inclusive)")
    high: int | None = Field(None, ge=1, description="uniform: largest length (inclusive)")
    mean: float | None = Field(None, gt=0, description="normal/lognormal: mean length")
    std: float | None = Field(None, ge=0, description="normal/lognormal: standard deviation of the length")
    file: Path | None = Field(None, description="empirical: file of observed lengths")
    min: int = Field(1, ge=1, description="clip below")
    max: int | None = Field(None, ge=1, description="clip above")

    _values: np.ndarray | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, bool):
            raise ValueError("a length must be an integer or a mapping with `dist`")
        if isinstance(data, int):
            return {"dist": "fixed", "value": data}
        return data

    @field_validator("file", mode="before")
    @classmethod
    def _file_path(cls, v: Any, info: ValidationInfo) -> Any:
        return _resolve_path(v, info)

    @model_validator(mode="after")
    def _check(self) -> LengthDist:
        needed = _DIST_PARAMS[self.dist]
        missing = [f for f in needed if getattr(self, f) is None]
        if missing:
            raise ValueError(f"dist={self.dist} needs {', '.join(needed)}; missing: {', '.join(missing)}")
        unused = [f for f in _ALL_PARAMS if f not in needed and getattr(self, f) is not None]
        if unused:
            raise ValueError(f"dist={self.dist} takes {', '.join(needed)} (+ min, max); not used: {', '.join(unused)}")
        if self.dist == "uniform" and self.low > self.high:
            raise ValueError(f"uniform: low ({self.low}) > high ({self.high})")
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) < min ({self.min})")
        if self.dist == "empirical":
            if not self.file.is_file():
                raise ValueError(f"empirical: file not found: {self.file}")
            self._values = read_empirical_values(self.file)
        if self.upper_bound() < self.lower_bound():
            raise ValueError(f"{self.dist}: no length is left between min and max")
        return self

    # -- bounds -------------------------------------------------------------------------

    def _lognormal_params(self) -> tuple[float, float]:
        sigma2 = math.log1p((self.std / self.mean) ** 2)
        return math.log(self.mean) - sigma2 / 2, math.sqrt(sigma2)

    def _natural_bounds(self) -> tuple[int, int]:
        if self.dist == "fixed":
            return self.value, self.value
        if self.dist == "uniform":
            return self.low, self.high
        if self.dist == "normal":
            return (math.floor(self.mean - DEFAULT_SIGMAS * self.std), math.ceil(self.mean + DEFAULT_SIGMAS * self.std))
        if self.dist == "lognormal":
            mu, sigma = self._lognormal_params()
            return (math.floor(math.exp(mu - DEFAULT_SIGMAS * sigma)), math.ceil(math.exp(mu + DEFAULT_SIGMAS * sigma)))
        values = self._values
        return int(values.min()), int(values.max())

    def lower_bound(self) -> int:
        lo, _ = self._natural_bounds()
        return max(self.min, lo)

    def upper_bound(self) -> int:
        _, hi = self._natural_bounds()
        hi = max(hi, self.min)
        return min(hi, self.max) if self.max is not None else hi

    # -- sampling -----------------------------------------------------------------------

    def sample(self, rng: np.random.Generator, n: int = 1) -> np.ndarray:
        if self.dist == "fixed":
            raw = np.full(n, float(self.value))
        elif self.dist == "uniform":
            raw = rng.integers(self.low, self.high + 1, size=n).astype(float)
        elif self.dist == "normal":
            raw = rng.normal(self.mean, self.std, size=n)
        elif self.dist == "lognormal":
            mu, sigma = self._lognormal_params()
            raw = rng.lognormal(mu, sigma, size=n)
        else:
            raw = rng.choice(self._values, size=n).astype(float)
        return np.clip(np.rint(raw), self.lower_bound(), self.upper_bound()).astype(np.int64)


class SharedPrefix(BaseModel):
    """The same system prompt / few-shot block on a fraction of requests (prefix caching)."""

    model_config = ConfigDict(extra="forbid")

    fraction: float = Field(..., gt=0, le=1, description="share of requests that carry a prefix")
    tokens: int = Field(..., ge=1, description="prefix length")
    count: int = Field(1, ge=1, description="distinct prefixes, picked uniformly")


class RequestClass(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field("default", pattern=r"^[A-Za-z0-9_.-]+$")
    weight: float = Field(1.0, gt=0)
    prompt_tokens: LengthDist | None = None
    output_tokens: LengthDist | None = None
    shared_prefix: SharedPrefix | None = None
    sharegpt: Path | None = Field(
        None,
        description="ShareGPT JSON/JSONL file: prompts (and, "
        "without output_tokens, output lengths) from its first two turns",
    )

    @field_validator("sharegpt", mode="before")
    @classmethod
    def _sharegpt_path(cls, v: Any, info: ValidationInfo) -> Any:
        return _resolve_path(v, info)

    @model_validator(mode="after")
    def _check(self) -> RequestClass:
        if self.sharegpt is not None:
            if self.prompt_tokens is not None:
                raise ValueError(
                    f"class {self.name}: with sharegpt the prompts come from the file; remove prompt_tokens"
                )
            if not self.sharegpt.is_file():
                raise ValueError(f"class {self.name}: sharegpt file not found: {self.sharegpt}")
        else:
            missing = [f for f in ("prompt_tokens", "output_tokens") if getattr(self, f) is None]
            if missing:
                raise ValueError(
                    f"class {self.name}: needs {' and '.join(missing)} (or a sharegpt file as the prompt source)"
                )
        if self.shared_prefix is not None and self.prompt_tokens is not None:
            lo = self.prompt_tokens.lower_bound()
            if lo <= self.shared_prefix.tokens:
                raise ValueError(
                    f"class {self.name}: prompt_tokens counts the whole prompt, so its smallest "
                    f"value ({lo}) must exceed shared_prefix.tokens ({self.shared_prefix.tokens}); "
                    "raise prompt_tokens.min"
                )
        return self

    def longest_prompt_tokens(self, endpoint: str) -> int:
        if self.prompt_tokens is not None:
            return self.prompt_tokens.upper_bound()
        prefix = self.shared_prefix.tokens if self.shared_prefix else 0
        margin = CHAT_TEMPLATE_MARGIN_TOKENS if endpoint == "chat" else 0
        return SHAREGPT_MAX_PROMPT_TOKENS + prefix + margin

    def longest_request_tokens(self, endpoint: str) -> int:
        if self.output_tokens is None:  # ShareGPT reference answers, filtered like vLLM
            prefix = self.shared_prefix.tokens if self.shared_prefix else 0
            margin = CHAT_TEMPLATE_MARGIN_TOKENS if endpoint == "chat" else 0
            return SHAREGPT_MAX_TOTAL_TOKENS + prefix + margin
        return self.longest_prompt_tokens(endpoint) + self.output_tokens.upper_bound()


class UnresolvedRateError(ValueError):
    """A rate given as a fraction of capacity that was never turned into requests/s."""


class ArrivalSpec(BaseModel):
    """When requests are sent.

    Open loop (`poisson`, `gamma`, `constant`, `burst`): at `rate` requests/s, whatever the
    server does. `gamma` gaps have shape `burstiness` (1 = Poisson, < 1 burstier, > 1
    smoother), as `vllm bench serve --burstiness`. `burst`: Poisson at `rate`, with
    `peak_multiplier` x `rate` for the first `duty` of every `period_s`.
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

    def mean_rate(self) -> float | None:
        """Long-run requests/s of an open loop (None for closed loop or unresolved)."""
        if self.rate is None:
            return None
        if self.mode == "burst":
            return self.rate * (1 - self.duty + self.duty * self.peak_multiplier)
        return self.rate


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
