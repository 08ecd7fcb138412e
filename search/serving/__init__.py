"""Serving: everything about one vLLM server and nothing about studies.

Which flags the installed vLLM takes (`registry`, `vllm_flags`), the machine (`hardware`), the
model (`model_info`, `local_model`), the facts a launch depends on (`context`), starting and
stopping a server as one process group with a guard (`server`, `server_guard`, `launch`), and why
a start failed (`failures`). Other packages import from here, never from the modules inside.
"""

from search.serving.context import launch_context
from search.serving.facts import facts_for_launch, recorded_cpu_kv_budget, serving_facts
from objectives.failure import Failure, FailureClass, FailurePhase
from search.serving.failures import classify
from search.serving.hardware import Gpu, Hardware
from search.serving.kv_log import describe_kv_check, kv_cache_check_at_start
from search.serving.memory import KvBudget, ModelShape
from search.serving.launcher import command_line, launch
from search.serving.local_model import build as build_default_model
from search.serving.local_model import build_dummy_architecture
from search.serving.model_info import ModelError, ModelInfo
from search.serving.model_info import read as read_model_info
from search.serving.registry import (PARAMS, REGISTRY, TUNER_OWNED, Adjustment, ConfigError, CpuRule, LaunchContext,
                                     ParamSpec, PASS_THROUGH, scenario_flag_problem, Support, support,
                                     ServerArgs, check_combination, memory_budget, unsupported_reason)
from search.serving.registry import resolve as resolve_server_args
from search.serving.server import ServerFailed, StopReport, VllmServer, set_aside
from search.serving.vllm_defaults import DEFAULT_MEMORY_UTILIZATION, default_batch
from search.serving.vllm_flags import InstalledVllm, VllmNotInstalled, parse_version
from search.serving.watch import while_serving

__all__ = [
    "CpuRule", "KvBudget", "ModelShape", "describe_kv_check", "kv_cache_check_at_start", "memory_budget",
    "DEFAULT_MEMORY_UTILIZATION", "PARAMS", "REGISTRY", "TUNER_OWNED", "PASS_THROUGH", "scenario_flag_problem", "Support", "support", "Adjustment", "ConfigError", "Failure", "FailureClass", "FailurePhase", "Gpu", "Hardware",
    "InstalledVllm", "LaunchContext", "ModelError", "ModelInfo", "ParamSpec", "ServerArgs",
    "ServerFailed", "StopReport", "VllmNotInstalled", "VllmServer", "build_default_model",
    "build_dummy_architecture", "check_combination", "classify", "command_line", "default_batch",
    "facts_for_launch", "launch", "launch_context", "parse_version", "read_model_info", "recorded_cpu_kv_budget",
    "resolve_server_args", "serving_facts", "set_aside", "unsupported_reason",
    "while_serving",
]
