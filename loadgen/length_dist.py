"""Token-length distributions (`LengthDist`): fixed, uniform, normal, lognormal or empirical (a
file of observed lengths), their hard bounds, how they are sampled and their quantiles.

Lengths count tokens as the server counts them (`request_class`). A relative `file` resolves
against the YAML file's directory when loaded with `WorkloadSpec.from_yaml`, against the working
directory otherwise (`resolve_yaml_path`). A distribution is its own module: request classes,
session scripts and traces all take their lengths from one."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator
from scipy import special

DistName = Literal["fixed", "uniform", "normal", "lognormal", "empirical"]

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

T = TypeVar("T")


def _required(value: T | None, name: str, dist: str) -> T:
    """A parameter its distribution needs (`LengthDist._check` has made sure it is given)."""
    if value is None:
        raise ValueError(f"dist={dist} needs {name}")
    return value


def resolve_yaml_path(value: Path | str | None, info: ValidationInfo) -> Path | None:
    """A path the YAML names, relative to the YAML file's directory (the validation context's
    `base_dir`, which `WorkloadSpec.from_yaml` sets) or else to the working directory."""
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
        return resolve_yaml_path(v, info)

    @model_validator(mode="after")
    def _check(self) -> LengthDist:
        needed = _DIST_PARAMS[self.dist]
        missing = [f for f in needed if getattr(self, f) is None]
        if missing:
            raise ValueError(f"dist={self.dist} needs {', '.join(needed)}; missing: {', '.join(missing)}")
        unused = [f for f in _ALL_PARAMS if f not in needed and getattr(self, f) is not None]
        if unused:
            raise ValueError(f"dist={self.dist} takes {', '.join(needed)} (+ min, max); not used: {', '.join(unused)}")
        if self.dist == "uniform":
            low, high = self._uniform_range()
            if low > high:
                raise ValueError(f"uniform: low ({low}) > high ({high})")
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) < min ({self.min})")
        if self.dist == "empirical":
            file = _required(self.file, "file", self.dist)
            if not file.is_file():
                raise ValueError(f"empirical: file not found: {file}")
            self._values = read_empirical_values(file)
        if self.upper_bound() < self.lower_bound():
            raise ValueError(f"{self.dist}: no length is left between min and max")
        return self

    @classmethod
    def observed(cls, values: np.ndarray, source: Path) -> LengthDist:
        """The empirical distribution of lengths already read from `source` (a trace's column)."""
        dist = cls.model_construct(dist="empirical", file=Path(source))
        dist._values = np.asarray(values, dtype=np.int64)
        return dist

    # -- the parameters of `dist`, as `_check` guarantees them ----------------------------

    def _fixed_value(self) -> int:
        return _required(self.value, "value", self.dist)

    def _uniform_range(self) -> tuple[int, int]:
        return _required(self.low, "low", self.dist), _required(self.high, "high", self.dist)

    def _mean_std(self) -> tuple[float, float]:
        return _required(self.mean, "mean", self.dist), _required(self.std, "std", self.dist)

    def _empirical_values(self) -> np.ndarray:
        return _required(self._values, "file", self.dist)

    # -- bounds -------------------------------------------------------------------------

    def _lognormal_params(self) -> tuple[float, float]:
        mean, std = self._mean_std()
        sigma2 = math.log1p((std / mean) ** 2)
        return math.log(mean) - sigma2 / 2, math.sqrt(sigma2)

    def _natural_bounds(self) -> tuple[int, int]:
        if self.dist == "fixed":
            return self._fixed_value(), self._fixed_value()
        if self.dist == "uniform":
            return self._uniform_range()
        if self.dist == "normal":
            mean, std = self._mean_std()
            return (math.floor(mean - DEFAULT_SIGMAS * std), math.ceil(mean + DEFAULT_SIGMAS * std))
        if self.dist == "lognormal":
            mu, sigma = self._lognormal_params()
            return (math.floor(math.exp(mu - DEFAULT_SIGMAS * sigma)), math.ceil(math.exp(mu + DEFAULT_SIGMAS * sigma)))
        values = self._empirical_values()
        return int(values.min()), int(values.max())

    def lower_bound(self) -> int:
        lo, _ = self._natural_bounds()
        return max(self.min, lo)

    def upper_bound(self) -> int:
        _, hi = self._natural_bounds()
        hi = max(hi, self.min)
        return min(hi, self.max) if self.max is not None else hi

    # -- sampling -----------------------------------------------------------------------

    def quantile(self, u: np.ndarray | float) -> np.ndarray:
        """The lengths at cumulative probabilities `u` in (0, 1), clipped as `sample` clips them:
        a stratified `u` (`unit_points`) spans the distribution evenly."""
        u = np.atleast_1d(np.asarray(u, dtype=np.float64))
        if self.dist == "fixed":
            raw = np.full(u.shape, float(self._fixed_value()))
        elif self.dist == "uniform":
            low, high = self._uniform_range()
            raw = low + np.floor(u * (high - low + 1))
        elif self.dist == "normal":
            mean, std = self._mean_std()
            raw = mean + std * special.ndtri(u)
        elif self.dist == "lognormal":
            mu, sigma = self._lognormal_params()
            raw = np.exp(mu + sigma * special.ndtri(u))
        else:
            values = np.sort(self._empirical_values())
            raw = values[np.minimum((u * len(values)).astype(np.int64), len(values) - 1)].astype(float)
        return np.clip(np.rint(raw), self.lower_bound(), self.upper_bound()).astype(np.int64)

    def sample(self, rng: np.random.Generator, n: int = 1) -> np.ndarray:
        if self.dist == "fixed":
            raw = np.full(n, float(self._fixed_value()))
        elif self.dist == "uniform":
            low, high = self._uniform_range()
            raw = rng.integers(low, high + 1, size=n).astype(float)
        elif self.dist == "normal":
            mean, std = self._mean_std()
            raw = rng.normal(mean, std, size=n)
        elif self.dist == "lognormal":
            mu, sigma = self._lognormal_params()
            raw = rng.lognormal(mu, sigma, size=n)
        else:
            raw = rng.choice(self._empirical_values(), size=n).astype(float)
        return np.clip(np.rint(raw), self.lower_bound(), self.upper_bound()).astype(np.int64)
