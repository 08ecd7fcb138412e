"""Running one vLLM server: the second facade of `serving`, for the code that starts
servers (the executor, its calibration, the benchmarks).

`serving` describes a server (flags, installed vLLM, hardware, model, the facts a
diagnosis needs) and starts nothing, so what only reads a stored study (the outputs) imports it
without the process machinery; this module starts one (`launch`: a process group with its
guard), watches a measurement against it (`while_serving`) and stops it.
"""

from serving.process.launcher import command_line, launch, launch_spec
from serving.process.server import ServerFailed, StopReport, VllmServer, set_aside
from serving.process.watch import FirstTokenWatch, while_serving

__all__ = [
    "FirstTokenWatch",
    "ServerFailed",
    "StopReport",
    "VllmServer",
    "command_line",
    "launch",
    "launch_spec",
    "set_aside",
    "while_serving",
]
