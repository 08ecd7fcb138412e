"""Running one trial: a plan goes in, an outcome comes out.

`trial` holds what the study loop exchanges with any executor (the plan, the measurement, the
`TrialExecutor` protocol; pure); the outcome and its parts are `search.trial_results`', re-exported
here. `vllm` is the real executor (`VllmExecutor`: a
vLLM server started per trial), and `calibration` measures the study's calibration on such a
server. Other packages import from here.
"""

from search.executor.calibration_run import CalibrationFailed, calibrate
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
]
