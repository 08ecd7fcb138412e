"""Scenario files (`configs/*.yaml`): workload, SLOs, objectives, search space, baselines.

Validated on load with pydantic; every error names the file, the field and what is allowed,
before any server starts. Loads and SLO thresholds may be stated relative to what the study
measures once on the vLLM-defaults baseline (`calibration`), so one file means the same thing
on the CPU default model and on an H100.

Modules: `sections` (each section's model), `model` (the scenario and its checks across
sections), `files` (finding, reading and validating a file). Import from here.
"""

from search.scenario.definition import (
    DEFAULT_ERROR_RATE_MAX,
    OPEN_LOOP_THROUGHPUT,
    SAFE_NAME_RULE,
    Scenario,
    flat_objective_warnings,
    is_safe_name,
)
from search.scenario.files import CONFIG_DIR, ScenarioError, digest, load, parse, read_mapping, resolve_path
from search.scenario.sections import (
    DEPLOYMENT_FACTS,
    SLO,
    Calibration,
    Confirmation,
    Cost,
    Domain,
    Goodput,
    RelativeThreshold,
    RelativeToDefault,
    Screening,
    Selection,
    ServerSection,
    Strict,
    Threshold,
    VerdictSection,
    deployment_differences,
    goodput_reference,
    unloaded_reference,
)

__all__ = [
    "CONFIG_DIR",
    "DEFAULT_ERROR_RATE_MAX",
    "DEPLOYMENT_FACTS",
    "OPEN_LOOP_THROUGHPUT",
    "SAFE_NAME_RULE",
    "SLO",
    "Calibration",
    "Confirmation",
    "Cost",
    "Domain",
    "Goodput",
    "RelativeThreshold",
    "RelativeToDefault",
    "Scenario",
    "ScenarioError",
    "Screening",
    "Selection",
    "ServerSection",
    "Strict",
    "Threshold",
    "VerdictSection",
    "deployment_differences",
    "digest",
    "flat_objective_warnings",
    "goodput_reference",
    "is_safe_name",
    "load",
    "parse",
    "read_mapping",
    "resolve_path",
    "unloaded_reference",
]
