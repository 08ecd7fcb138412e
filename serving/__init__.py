"""Serving: everything about one vLLM server and nothing about studies.

This facade describes a server and starts none: which flags a scenario may set (`parameters`) and
how a configuration becomes a server's flags on the installed vLLM (`server_flags`), what is rejected
before a start and the KV cache a started one allocated against the arithmetic's (`checks`), the
machine: its devices and the installed vLLM, that vLLM's parser, whether the tuner supports it,
and the tuner's cache on it (`machine`), what that vLLM runs with there when no flag sets a
value (`defaults`), the model (the `model` package: its
config, the built-in one, hub ids, memory arithmetic), the facts a launch depends on
(`context`), the failure vocabulary every package names a failed trial in, and which of it a
server's log says (`failures`: classes with their advice, phases, the `Failure` record, the
default start timeout, `classify`).
Starting and stopping a server as one process group with a guard and watching a measurement
against it is the second facade, `serving.process`. Other packages import from these two, never
from the modules inside. The tuner's HTTP to a running server (its health, the prefix-cache
reset, the reconfiguration's request) is `vllm_http`'s, the package below every other.
"""

from serving.checks import check_combination, describe_kv_check, kv_cache_check_at_start, memory_budget
from serving.context import launch_context
from serving.context import resolve_model as read_model_info
from serving.defaults import DEFAULT_MEMORY_UTILIZATION, MACHINE_DEFAULTED, default_batch, unset_value
from serving.failures import DEFAULT_STARTUP_TIMEOUT_S, Failure, FailureClass, FailurePhase, classify
from serving.machine import (
    OLDEST_SUPPORTED_VLLM,
    FlagInfo,
    Gpu,
    Hardware,
    InstalledVllm,
    VllmNotInstalled,
    VllmTooOld,
    parse_version,
)
from serving.model.hub import pinned as pinned_model
from serving.model.hub import study_label as model_study_label
from serving.model.info import ModelError, ModelInfo
from serving.model.local import DEFAULT_SPEC as DEFAULT_MODEL_SPEC
from serving.model.local import TinyLlamaSpec, build_dummy_architecture, default_model_dir
from serving.model.local import build as build_default_model
from serving.model.memory import KvBudget, ModelShape
from serving.parameters import PARAMS, PASS_THROUGH, REGISTRY, TUNER_OWNED, CpuRule, ParamSpec, scenario_flag_problem
from serving.server_flags import (
    Adjustment,
    ConfigError,
    LaunchContext,
    ServerArgs,
    Support,
    support,
    unsupported_reason,
)
from serving.server_flags import resolve as resolve_server_args
from serving.start_anatomy import PHASES as START_PHASES
from serving.start_anatomy import StartAnatomy, describe_start_anatomy, start_anatomy

__all__ = [
    "DEFAULT_MEMORY_UTILIZATION",
    "DEFAULT_MODEL_SPEC",
    "DEFAULT_STARTUP_TIMEOUT_S",
    "MACHINE_DEFAULTED",
    "OLDEST_SUPPORTED_VLLM",
    "PARAMS",
    "PASS_THROUGH",
    "REGISTRY",
    "START_PHASES",
    "TUNER_OWNED",
    "Adjustment",
    "ConfigError",
    "CpuRule",
    "Failure",
    "FailureClass",
    "FailurePhase",
    "FlagInfo",
    "Gpu",
    "Hardware",
    "InstalledVllm",
    "KvBudget",
    "LaunchContext",
    "ModelError",
    "ModelInfo",
    "ModelShape",
    "ParamSpec",
    "ServerArgs",
    "StartAnatomy",
    "Support",
    "TinyLlamaSpec",
    "VllmNotInstalled",
    "VllmTooOld",
    "build_default_model",
    "build_dummy_architecture",
    "check_combination",
    "classify",
    "default_batch",
    "default_model_dir",
    "describe_kv_check",
    "describe_start_anatomy",
    "kv_cache_check_at_start",
    "launch_context",
    "memory_budget",
    "model_study_label",
    "parse_version",
    "pinned_model",
    "read_model_info",
    "resolve_server_args",
    "scenario_flag_problem",
    "start_anatomy",
    "support",
    "unset_value",
    "unsupported_reason",
]
