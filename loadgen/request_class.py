"""A workload's request classes, and what each of its requests is: its class and its lengths.

A request class (`RequestClass`): its weight, prompt and output lengths or the ShareGPT file its
prompts come from, and the shared prefix some of its requests carry; the longest request it can
send, which the study checks against max_model_len.

Token-length distributions (`LengthDist`): fixed, uniform, normal, lognormal or empirical (a file of
observed lengths), their hard bounds, how they are sampled and their quantiles.

Lengths count tokens as the server counts them: `prompt_tokens` is the whole prompt (shared
prefix and, on the chat endpoint, the chat template included), `output_tokens` is exact
(`ignore_eos` + `max_tokens`). A relative `file` resolves against the YAML file's directory when
loaded with `WorkloadSpec.from_yaml`, against the working directory otherwise.

**The order requests come in**: each request's class (`ClassOrder`), and where in its class's
length and prefix distributions it falls (`unit_points`, through `LengthDist.quantile`).
Representative in every window, by construction.

Drawing each request's class and lengths independently makes a short run's mix a matter of
luck: `mixed`'s seed once drew 19 `short` requests in a row (0.7^19, about 0.1%), and every
stage of every trial replayed that prefix, so a stage of 16 requests measured a workload the
scenario does not describe. Here instead:

* **Classes follow a quota order** (`ClassOrder`, Tijdeman's chairman assignment): each
  request goes to a class that is behind its share, the one that would soonest fall too far
  behind. With rational weights the order is periodic (its period is the weights' common
  denominator, at most `MAX_PERIOD`), so request i's class and its rank within the class are
  O(1). Any window of n consecutive requests holds each class's weight times n to within
  `window_bound(k)` = 2 - 1/(k-1) requests: within one for two classes (the order is then a
  Sturmian word: every window has the floor or the ceiling of its share), within 1.5 for three.
  No order can promise one request for three classes and every weight vector (an exhaustive
  search finds none for 0.15/0.05/0.80, `tests/unit/loadgen/test_request_order.py`); for the
  weights scenarios usually write (0.5/0.3/0.2, 0.6/0.3/0.1) this one holds one.
* **Within a class, lengths and prefixes are stratified** (`unit_points`): the class's j-th
  request takes the j-th point of a Kronecker sequence (frac(s + j alpha), one alpha a dimension), and
  its prompt length, output length and prefix are that point's coordinates through each
  distribution's quantile function. A Kronecker sequence looks the same from any start (a
  window of it is the sequence from another offset), so a short window still spans each
  class's quantiles, its tails included.
* **The seed picks the phase**: where in the period the order starts and each class's offsets
  `s`, so two seeds give two orders of the same quality.

Common random numbers hold: request i depends on (seed, stream, i) alone, so a stage that sends
requests a .. a+n-1 sends the same ones in every trial, and a longer stage sends those and more.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from fractions import Fraction
from functools import lru_cache
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


# ShareGPT filters, as `vllm bench serve` applies them (prompt and reference answer lengths).
SHAREGPT_MIN_TOKENS = 4
SHAREGPT_MAX_PROMPT_TOKENS = 1024
SHAREGPT_MAX_TOTAL_TOKENS = 2048
# A ShareGPT chat prompt is its text plus the chat template, whose size we only know with the
# tokenizer; this bounds it for `longest_request_tokens`.
CHAT_TEMPLATE_MARGIN_TOKENS = 64


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
        return resolve_yaml_path(v, info)

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


# -- the order: each request's class, and its point in the class's distributions ---------

# Weights are read as fractions of denominator at most 1000 where their common denominator stays
# within MAX_PERIOD (0.7/0.3: 10), else as multiples of 1/MAX_PERIOD: a window of n requests then
# lies off the weights themselves by at most n/MAX_PERIOD more than off its shares.
MAX_DENOMINATOR = 1000
MAX_PERIOD = 100_000
_ORDER_STREAM = 21
_STRATA_STREAM = 22
STRATA_DIMS = 3  # prompt length, output length, shared prefix


def _fractions(weights: tuple[float, ...]) -> list[Fraction]:
    """The weights as shares that sum to 1 exactly, with a common denominator of at most
    MAX_PERIOD; none is 0."""
    total = math.fsum(weights)
    shares = [max(Fraction(w / total).limit_denominator(MAX_DENOMINATOR), Fraction(1, MAX_PERIOD)) for w in weights]
    if math.lcm(*(s.denominator for s in shares)) > MAX_PERIOD:
        shares = [Fraction(max(1, round(w / total * MAX_PERIOD)), MAX_PERIOD) for w in weights]
    # each share was rounded on its own: the largest takes up what they miss or add together
    big = max(range(len(shares)), key=lambda c: shares[c])
    shares[big] += 1 - sum(shares)
    return shares


@lru_cache(maxsize=64)
def _period(weights: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(one period of the quota order, each class's count before each position of it).

    Tijdeman's chairman assignment: at request t, among the classes at least 1/(2k-2) of a
    request behind their share, the one that would soonest fall 1 - 1/(2k-2) behind. Every
    class's count then stays within 1 - 1/(2k-2) of its share after every request, so any
    window's count within 2 - 1/(k-1) of it; with rational shares the order is periodic."""
    shares = _fractions(weights)
    k = len(shares)
    q = math.lcm(*(s.denominator for s in shares))
    quota = [int(s * q) for s in shares]
    counts = [0] * k
    order = np.zeros(q, dtype=np.int64)
    # In units of 1/(q (2k-2)) requests, to stay in integers: class c is behind its share after
    # request t by (quota_c t - count_c q) / q; it is due from 1/(2k-2) behind, and falls
    # 1 - 1/(2k-2) behind after (1 - 1/(2k-2) - behind) / share_c more requests.
    unit = 2 * k - 2
    for t in range(1, q + 1 if k > 1 else 1):
        behind = [(quota[c] * t - counts[c] * q) * unit for c in range(k)]
        due = [c for c in range(k) if behind[c] >= q] or list(range(k))
        best = due[0]
        for c in due[1:]:  # the soonest to fall too far behind: compare (k q - q - behind) / quota
            if ((unit - 1) * q - behind[c]) * quota[best] < ((unit - 1) * q - behind[best]) * quota[c]:
                best = c
        counts[best] += 1
        order[t - 1] = best
    if k > 1 and counts != quota:  # the shares' remainders return to 0 at the period's end
        raise AssertionError(f"quota order did not close its period: {counts} vs {quota}")
    before = np.zeros((k, q + 1), dtype=np.int64)
    for c in range(k):
        before[c, 1:] = np.cumsum(order == c)
    return order, before


def window_bound(classes: int) -> float:
    """How far any window's count of a class can lie from its weight times the window's length
    (strictly less than this): 2 - 1/(k-1) for k classes, Tijdeman's bound doubled."""
    return 0.0 if classes < 2 else 2.0 - 1.0 / (classes - 1)


def mix_deviation(counts: Mapping[str, int], weights: Mapping[str, float]) -> float:
    """How far, in requests, a stage's count of a class lies at most from the class's share of the
    stage's requests (`weights` need not sum to 1); below `window_bound` for a window of this
    order."""
    n, total = sum(counts.values()), sum(weights.values())
    return max((abs(counts.get(c, 0) - w / total * n) for c, w in weights.items()), default=0.0)


def _seeded(seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), *(int(k) for k in key)])


class ClassOrder:
    """Request i's class and its rank among the requests of that class before it (from index 0)."""

    def __init__(self, weights: tuple[float, ...] | list[float], seed: int, stream: int = 0):
        self.weights = tuple(float(w) for w in weights)
        self.order, self.before = _period(self.weights)
        self.period = len(self.order)
        self.offset = int(_seeded(seed, _ORDER_STREAM, stream).integers(self.period))

    def _count(self, c: int, x: int) -> int:
        """Class c's requests among positions 0 .. x-1 of the periodic order."""
        full, rest = divmod(x, self.period)
        return full * int(self.before[c, self.period]) + int(self.before[c, rest])

    def class_of(self, i: int) -> int:
        return int(self.order[(self.offset + i) % self.period])

    def rank_of(self, i: int) -> int:
        """How many requests of request i's class come before it (from request 0 on)."""
        c = self.class_of(i)
        return self._count(c, self.offset + i) - self._count(c, self.offset)

    def counts(self, first: int, n: int) -> list[int]:
        """Each class's requests among first .. first+n-1."""
        a, b = self.offset + first, self.offset + first + n
        return [self._count(c, b) - self._count(c, a) for c in range(len(self.weights))]


# Each dimension's step: quadratic irrationals with small partial quotients (the golden ratio's
# 1, then sqrt(6)'s 2 and 4, sqrt(2)'s 2), each a good sequence alone (10 consecutive points
# reach within 15-17% of both ends of (0, 1) from any start), and rationally independent, so
# prompt and output lengths do not move in step.
_STEPS = np.array([(math.sqrt(5) - 1) / 2, math.sqrt(6) - 2, math.sqrt(2) - 1])


def unit_points(seed: int, stream: int, class_index: int, ranks: np.ndarray | int) -> np.ndarray:
    """The stratified points in (0, 1)^STRATA_DIMS of a class's requests of the given ranks."""
    ranks = np.atleast_1d(np.asarray(ranks, dtype=np.float64))
    start = _seeded(seed, _STRATA_STREAM, stream, class_index).random(STRATA_DIMS)
    points = np.mod(start[None, :] + ranks[:, None] * _STEPS[None, :], 1.0)
    # never exactly 0 or 1: the quantile functions of unbounded distributions are infinite there
    return np.clip(points, 1e-9, 1 - 1e-9)
