"""The search, replayed: a recorded landscape of a scenario's space, surrogates fitted on it, and
an executor that answers the real study loop from them, so samplers can be compared in seconds.

`landscape` (the file format), `design` (which configs a landscape measures), `surrogate` (the
models and their held-out accuracy), `executor` (`ReplayExecutor` and what the study loop needs
beside it), `synthetic` (a stand-in landscape until a measured one exists).
"""

from search.replay.design import repeat_rounds, space_filling
from search.replay.executor import ReplayExecutor, replay_calibration, replay_context, replay_factory, rng_for
from search.replay.landscape import CAPACITY, Config, Landscape, LandscapeError, ScreenedRun
from search.replay.surrogate import Accuracy, Surrogate, cross_validated, encode

__all__ = [
    "CAPACITY",
    "Accuracy",
    "Config",
    "Landscape",
    "LandscapeError",
    "ReplayExecutor",
    "ScreenedRun",
    "Surrogate",
    "cross_validated",
    "encode",
    "repeat_rounds",
    "replay_calibration",
    "replay_context",
    "replay_factory",
    "rng_for",
    "space_filling",
]
