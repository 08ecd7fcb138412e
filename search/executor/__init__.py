"""Running one trial: a plan goes in, an outcome comes out.

`trial` holds what the study loop exchanges with any executor (the plan, the measurement, the
`TrialExecutor` protocol; pure); the outcome and its parts are `search.trial_results`', re-exported
here. `vllm` is the real executor (`VllmExecutor`: a vLLM server started per trial), and
`calibration_run` measures the study's calibration on such a server. A trial's load stages, where
its scenario has a `capacity:` section, are `staged_load`'s: asked and planned by `StagedLoad`
(pure) and run by `run_stages` (the target stage, then the capacity search, each stage judged
by `objectives.stages`). Other packages import from here.
"""

from search.executor.calibration_run import CalibrationFailed, calibrate
from search.executor.staged_load import StageCallback, StagedLoad, StageSearch, run_stages
from search.executor.trial import Measurement, PhaseCallback, TrialExecutor, TrialPlan, close_executor, plan_trial
from search.executor.vllm import MAX_STARTS, STAGED_SERVER_ENV, VllmExecutor, load_failure, measured_before
from search.trial_results import RetriedStart, Timings, TrialOutcome

__all__ = [
    "MAX_STARTS",
    "STAGED_SERVER_ENV",
    "CalibrationFailed",
    "Measurement",
    "PhaseCallback",
    "RetriedStart",
    "StageCallback",
    "StageSearch",
    "StagedLoad",
    "Timings",
    "TrialExecutor",
    "TrialOutcome",
    "TrialPlan",
    "VllmExecutor",
    "calibrate",
    "close_executor",
    "load_failure",
    "measured_before",
    "plan_trial",
    "run_stages",
]
