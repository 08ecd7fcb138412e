"""Serving: everything about one vLLM server and nothing about studies.

Which flags the installed vLLM takes (`registry`, `vllm_flags`) and whether it is one the tuner
supports (`vllm_support`), the machine (`hardware`), the model (`model_info`, `local_model`, and
`hub` for one named by Hugging Face id), the facts a launch depends on (`context`), starting and
stopping a server as one process group with a guard (`server`, `server_guard`, `launch`), and why
a start failed (`failures`). Other packages import from here, never from the modules inside.
"""

from search.serving.context import launch_context
from search.serving.context import resolve_model as read_model_info
from search.serving.facts import facts_for_launch, recorded_cpu_kv_budget, serving_facts
from objectives.failure import Failure, FailureClass, FailurePhase
from search.serving.failures import classify
from search.serving.hardware import Gpu, Hardware
from search.serving.launcher import command_line, launch
from search.serving.local_model import build as build_default_model
from search.serving.local_model import build_dummy_architecture
from search.serving.hub import pinned as pinned_model
from search.serving.hub import study_label as model_study_label
from search.serving.model_info import ModelError, ModelInfo
from search.serving.registry import (PARAMS, REGISTRY, TUNER_OWNED, Adjustment, ConfigError, LaunchContext, ParamSpec,
                                     PASS_THROUGH, scenario_flag_problem, Support, support,
                                     ServerArgs, check_combination, unsupported_reason)
from search.serving.registry import resolve as resolve_server_args
from search.serving.server import ServerFailed, StopReport, VllmServer, set_aside
from search.serving.vllm_defaults import DEFAULT_MEMORY_UTILIZATION, default_batch
from search.serving.vllm_flags import InstalledVllm, VllmNotInstalled, parse_version
from search.serving.vllm_support import OLDEST_SUPPORTED_VLLM, VllmTooOld
from search.serving.watch import while_serving

__all__ = [
    "DEFAULT_MEMORY_UTILIZATION", "PARAMS", "REGISTRY", "TUNER_OWNED", "PASS_THROUGH", "scenario_flag_problem", "Support", "support", "Adjustment", "ConfigError", "Failure", "FailureClass", "FailurePhase", "Gpu", "Hardware",
    "InstalledVllm", "LaunchContext", "ModelError", "ModelInfo", "OLDEST_SUPPORTED_VLLM", "ParamSpec", "ServerArgs",
    "ServerFailed", "StopReport", "VllmNotInstalled", "VllmServer", "VllmTooOld", "build_default_model",
    "build_dummy_architecture", "check_combination", "classify", "command_line", "default_batch",
    "facts_for_launch", "launch", "launch_context", "model_study_label", "parse_version", "pinned_model",
    "read_model_info", "recorded_cpu_kv_budget",
    "resolve_server_args", "serving_facts", "set_aside", "unsupported_reason",
    "while_serving",
]
