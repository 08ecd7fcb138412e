"""What the decision tree answers: the `Bottleneck` names (`BOTTLENECKS`, in tree order), the
`Diagnosis` that names one with its evidence, next steps and findings, and `summarize`, which
counts the trials each bottleneck limited. Its own module because the tree and each of its
per-cause checks in `causes` build a `Diagnosis`, and the outputs read it back."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from objectives.diagnosis.antipattern_rule import Finding

Bottleneck = Literal[
    "startup_failure",
    "server_errors",
    "client_bound",
    "preemption",
    "queueing",
    "prefill_bound",
    "decode_bound",
    "healthy",
]
BOTTLENECKS: tuple[str, ...] = get_args(Bottleneck)


@dataclass
class Diagnosis:
    bottleneck: str  # one of BOTTLENECKS
    headline: str  # one sentence
    evidence: list[str] = field(default_factory=list)  # the numbers that decided it
    next_steps: list[str] = field(default_factory=list)  # parameters and directions
    also: list[str] = field(default_factory=list)  # other symptoms, lower in the tree
    slo_met: bool | None = None
    findings: list[Finding] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["findings"] = [f.as_dict() for f in self.findings]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Diagnosis:
        return cls(**{**d, "findings": [Finding(**f) for f in d.get("findings", [])]})

    def markdown(self) -> str:
        """For optuna-dashboard notes and the report."""
        lines = [f"**Bottleneck: {self.bottleneck.replace('_', ' ')}**. {self.headline}", ""]
        for title, items in (("Evidence", self.evidence), ("Try next", self.next_steps), ("Also seen", self.also)):
            if items:
                lines.append(f"*{title}:*")
                lines += [f"- {x}" for x in items]
                lines.append("")
        if self.findings:
            lines.append("*Configuration anti-patterns:*")
            lines += [f"- [{f.severity}] {f.message} ({f.applies_to_v1})" for f in self.findings]
        return "\n".join(lines).rstrip() + "\n"


def summarize(diagnoses: Iterable[dict[str, Any]]) -> dict[str, int]:
    """How many trials each bottleneck limited, in tree order."""
    counts = dict.fromkeys(BOTTLENECKS, 0)
    for d in diagnoses:
        if d:
            counts[d["bottleneck"]] = counts.get(d["bottleneck"], 0) + 1
    return {k: v for k, v in counts.items() if v}
