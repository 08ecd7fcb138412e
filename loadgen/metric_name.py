"""The name of a metric, and its one parser (`MetricName`).

Every metric is keyed by its name: `ttft_p95_ms@short` is family `ttft`, statistic `p95`, unit
`ms`, request class `short`. Flat metrics are keyed by these names everywhere (the load run's
output, objectives, SLOs, stored rows, outputs); every place that needs a part of a name asks
this type instead of splitting the string itself, so the naming is a module of its own, below
the metrics that are computed under these names."""

from __future__ import annotations

import re
from dataclasses import dataclass

CLASS_SEPARATOR = "@"
LATENCY_FAMILIES = ("ttft", "tpot", "itl", "e2el")
_STAT = re.compile(r"^(mean|median|std|p(\d+(?:\.\d+)?))$")


@dataclass(frozen=True)
class MetricName:
    base: str  # the name without its class: `ttft_p95_ms`
    cls: str | None = None  # the request class it is read over; None: all requests

    @classmethod
    def parse(cls, text: str) -> MetricName:
        base, sep, klass = str(text).partition(CLASS_SEPARATOR)
        return cls(base, klass if sep else None)

    def __str__(self) -> str:
        return self.base if self.cls is None else f"{self.base}{CLASS_SEPARATOR}{self.cls}"

    @property
    def family(self) -> str:
        """`ttft`, `tpot`, `itl`, `e2el`, `output` (throughput), `slo` (capacity), ..."""
        return self.base.split("_", 1)[0]

    @property
    def unit(self) -> str | None:
        """`ms` for latencies, None where the name gives none."""
        return "ms" if self.base.endswith("_ms") else None

    @property
    def statistic(self) -> str | None:
        """`mean`, `median`, `std`, `p95`, ... for a latency name; None otherwise."""
        if self.family not in LATENCY_FAMILIES or self.unit != "ms":
            return None
        middle = self.base[len(self.family) + 1 : -len("_ms")]
        return middle if _STAT.match(middle) else None

    @property
    def is_latency(self) -> bool:
        return self.statistic is not None

    @property
    def quantile(self) -> float | None:
        """0.95 for `p95`, 0.5 for `median`; None for a mean, a std or a non-latency name."""
        stat = self.statistic
        if stat == "median":
            return 0.5
        m = _STAT.match(stat or "")
        return float(m.group(2)) / 100 if m and m.group(2) else None


def class_key(base: str, klass: str | None) -> str:
    """`class_key("ttft_p95_ms", "short")` -> `ttft_p95_ms@short` (the per-class key format)."""
    return str(MetricName(base, klass))
