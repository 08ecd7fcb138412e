"""What the study calls for each trial: the tree's diagnosis with the configuration's anti-patterns."""

from __future__ import annotations

from typing import Any

from loadgen import WorkloadSpec
from objectives.diagnosis.antipatterns import antipatterns
from objectives.diagnosis.facts import ServingFacts
from objectives.diagnosis.results import Diagnosis
from objectives.diagnosis.tree import diagnose
from serving import Failure


def diagnose_trial(
    metrics: dict[str, Any],
    config: dict[str, Any],
    workload: WorkloadSpec | None,
    failure: Failure | None = None,
    *,
    constraints: dict[str, float] | None = None,
    unloaded: dict[str, float] | None = None,
    facts: ServingFacts = ServingFacts(),
) -> Diagnosis:
    """Diagnosis and anti-patterns of one trial (stored as `as_dict()` in `autotune_trials.diagnosis`).

    `facts`: which parameters the installed vLLM takes, CPU or GPU, the KV budget, vLLM's defaults
    (`facts_for_launch(ctx)` in a study); without them the checks assume a current
    V1 vLLM and skip hardware-specific ones.
    """
    d = diagnose(metrics, config, workload, constraints=constraints, failure=failure, unloaded=unloaded, facts=facts)
    d.findings = antipatterns(
        config, workload, facts=facts, metrics=metrics if d.bottleneck != "startup_failure" else None
    )
    return d
