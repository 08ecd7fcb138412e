"""The sections of a scenario file beside its workload: SLO and goodput bounds (a number, or a
multiple of the idle server's median: `RelativeThreshold`), the search space's domains, the
selection rule, and the calibration, screening, confirmation and server settings."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
)

from loadgen import GoodputSLO, MetricName
from objectives.practical import PracticalSpec
from objectives.scoring import SLOSpec
from serving import DEFAULT_STARTUP_TIMEOUT_S, scenario_flag_problem


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _number_or(allowed: str) -> WrapValidator:
    """One error, naming what the field allows, for a field that takes a number or a mapping.
    Pydantic reports a failed union once per member ("Input should be a valid number", then the
    mapping's own complaint), two lines for one mistake; and it reads `true` as the number 1."""

    def check(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"{allowed}; got {value!r}")
        try:
            return handler(value)
        except ValidationError:
            raise ValueError(f"{allowed}; got {value!r}") from None

    return WrapValidator(check)


class RelativeThreshold(Strict):
    """A latency bound as a multiple of an unloaded median the calibration measures: the same
    metric family's, over the same request class, or over the class `of` names.

    `of` anchors a class's bound on the work it waits behind. A short request's TTFT under load is
    mostly the long prefills in front of it, which scale with the machine's compute; its own
    unloaded TTFT is partly fixed per-request work, which scales less. A bound on the short
    class's own median is therefore tighter on a slower machine; one on the long class's is the
    same (docs/scenarios.md, "Relative bounds")."""

    x_unloaded: float = Field(gt=0)
    of: str | None = None


Threshold = Annotated[
    float | RelativeThreshold,
    _number_or("a number, or {x_unloaded: k} with k > 0 (k times an unloaded median; `of: <class>` names its class)"),
]


def unloaded_reference(metric: str, of: str | None = None) -> str | None:
    """The calibration metric a relative bound on `metric` multiplies: the median of the same
    family, over the metric's own class or over class `of`; None for a metric that is no latency
    statistic."""
    name = MetricName.parse(metric)
    if name.statistic not in ("mean", "median") and name.quantile is None:
        return None
    return str(MetricName(f"{name.family}_median_ms", of or name.cls))


def goodput_reference(field: str, of: str | None = None) -> str:
    """The calibration metric a relative goodput bound (`ttft_ms`, `tpot_ms`, `e2el_ms`) multiplies."""
    return str(MetricName(f"{field.split('_')[0]}_median_ms", of))


def _relative_only_on_latency(slo: SLOSpec[Threshold]) -> SLOSpec[Threshold]:
    if isinstance(slo.bound, RelativeThreshold) and unloaded_reference(slo.metric) is None:
        raise ValueError(
            f"{slo.metric}: x_unloaded applies to latency metrics (ttft/tpot/itl/e2el_<stat>_ms) only; give a number"
        )
    return slo


# The scoring's SLO and goodput types, with bounds that may be relative (calibration.resolve
# turns them into the plain, numeric ones).
SLO = Annotated[SLOSpec[Threshold], AfterValidator(_relative_only_on_latency)]
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


class RelativeToDefault(Strict):
    """A search bound as a multiple of what vLLM runs the parameter with when no flag sets it, on
    the machine the study runs on (`serving.unset_value`). vLLM's batch defaults differ 4-8x
    between its CPU build (2,048 batched tokens, 128 sequences) and an H100 or H200 (8,192 and
    1,024): a range stated in numbers fitted to one is another search on the other, one stated
    in multiples of the defaults is the same search on both (docs/scenarios.md, "Search space")."""

    x_default: float = Field(gt=0)


Bound = Annotated[
    float | RelativeToDefault,
    _number_or("a number, or {x_default: k} with k > 0 (k times vLLM's default for the parameter on the machine)"),
]


class Domain(Strict):
    """A search range: low/high (log, step) for numbers, each a number or a multiple of vLLM's
    default on the machine (`RelativeToDefault`), or an explicit list of choices."""

    low: Bound | None = None
    high: Bound | None = None
    log: bool = False
    step: float | None = None
    choices: list[Any] | None = None

    @property
    def relative(self) -> bool:
        """Whether a bound is a multiple of vLLM's default: the range then depends on the machine."""
        return isinstance(self.low, RelativeToDefault) or isinstance(self.high, RelativeToDefault)

    @model_validator(mode="after")
    def _shape(self) -> Domain:
        if self.choices is not None:
            if self.low is not None or self.high is not None:
                raise ValueError("give either choices or low/high, not both")
            if not self.choices:
                raise ValueError("choices must not be empty")
            return self
        if self.low is None or self.high is None:
            raise ValueError("give low and high, or choices")
        # Bounds of one kind compare here; a number against a multiple of the default compares
        # once the machine is known (search.space.distribution).
        low, high, unit = self.low, self.high, ""
        if isinstance(low, RelativeToDefault) and isinstance(high, RelativeToDefault):
            low, high, unit = low.x_default, high.x_default, "x vLLM's default"
        if isinstance(low, float) and isinstance(high, float) and low > high:
            raise ValueError(f"low ({low}{unit}) is greater than high ({high}{unit})")
        if self.log and isinstance(self.low, float) and self.low <= 0:
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
    # Saturation loads run before the first round, unmeasured, each followed by the prefix-cache
    # reset that precedes every round: the first round then follows a load, as every later one
    # does. Without one, a fresh server's first round read the unloaded TTFT median the highest
    # of its three in 7 of 8 calibrations, up to 1.9x the median (docs/results.md, "Calibration").
    warmup_rounds: int = Field(default=1, ge=0)


class Screening(Strict):
    """A cheaper measurement for the search phase (multi-fidelity): trials are screened short and
    the confirmation phase re-measures the front in full. Unset fields: as the full measurement."""

    duration_s: float | None = Field(default=None, gt=0)  # the target stage's sending window
    num_requests: int | None = Field(default=None, ge=1)  # for workloads sized in requests
    max_stages: int | None = Field(default=None, ge=1)  # capacity stages after the target
    # A config that differs from the last trial's server only in max_num_seqs,
    # max_num_batched_tokens and long_prefill_token_threshold, each at or below the server's
    # start value, is measured on that server with its limits lowered in place instead of on a
    # fresh start (search.executor.reuse). Off: its fidelity A/B is in docs/measurement.md,
    # "Screening without a restart".
    reconfigure: bool = False


class Confirmation(Strict):
    """The end of a study: the chosen configuration, the next best members of the feasible front
    and every baseline, each re-measured `runs` times on fresh server starts, interleaved
    (A B C A B C ...); the verdict and best.yaml come from these runs (`search.study.verdict`)."""

    runs: int = Field(default=3, ge=0)  # per candidate; 0: no phase, the single measurements decide
    front: int = Field(default=2, ge=1)  # feasible front members, the chosen one first
    # How far a baseline's capacity is searched: `until_decided` stops once it misses at a rate
    # every other confirmed candidate beats beyond the practical threshold (the comparison is
    # decided; the stages below, at the lowest rates, are a study's longest); `full` narrows it
    # as far as any candidate's, for a figure of the baseline's own capacity.
    baseline_search: Literal["until_decided", "full"] = "until_decided"


class VerdictSection(Strict):
    """How the confirmation's verdict calls a difference: a win or a loss only past `practical`'s
    threshold for the metric (`objectives.practical`), "equal within X%" inside it."""

    practical: PracticalSpec = Field(default_factory=PracticalSpec)


class Cost(Strict):
    """The price of the hardware one server runs on, per hour: the outputs quote what serving
    costs at the capacity under the SLO (`objectives.serving_cost`). It covers everything the
    server uses: one on four GPUs (tensor_parallel_size 4) costs four GPUs' price, or the
    machine's. `autotune search --usd-per-hour` overrides it (`search.study.price`)."""

    usd_per_hour: float = Field(gt=0, allow_inf_nan=False)


# What is served, rather than how it is scheduled: the context length, the numerics, the weights.
# A scenario's `server.fixed` values of these hold for its baselines too, so a baseline is
# compared like for like; a baseline that sets one itself keeps its own, and the study says which
# differ (`deployment_differences`).
DEPLOYMENT_FACTS = ("max_model_len", "dtype", "load_format", "quantization", "kv_cache_dtype")


def deployment_differences(config: dict[str, Any], other: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The deployment facts two configurations set differently: {fact: (config's, other's)}, an
    unset fact shown as None (the model's own, or vLLM's default)."""
    return {
        k: (config.get(k), other.get(k))
        for k in DEPLOYMENT_FACTS
        if (k in config or k in other) and config.get(k) != other.get(k)
    }


class ServerSection(Strict):
    # Held for every trial. The deployment facts among them (DEPLOYMENT_FACTS) hold for the
    # baselines too, unless a baseline sets its own; the rest (scheduling, memory) do not: a
    # baseline is taken as written there.
    fixed: dict[str, Any] = Field(default_factory=dict)
    startup_timeout_s: float = Field(default=DEFAULT_STARTUP_TIMEOUT_S, gt=0)

    def deployment(self) -> dict[str, Any]:
        """The fixed values that are deployment facts: what a baseline gets unless it sets its own."""
        return {k: v for k, v in self.fixed.items() if k in DEPLOYMENT_FACTS}

    @field_validator("fixed")
    @classmethod
    def _allowed_flags(cls, v: dict[str, Any]) -> dict[str, Any]:
        if (problem := scenario_flag_problem(v)) is not None:
            raise ValueError(problem)
        return v
