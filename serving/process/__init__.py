"""Running one vLLM server: the second facade of `serving`, for the code that starts
servers (the executor, its calibration, the benchmarks).

`serving` describes a server (flags, installed vLLM, hardware, model, the facts a
diagnosis needs) and starts nothing, so what only reads a stored study (the outputs) imports it
without the process machinery; this module starts one (`launch`: a process group with its
guard, `process_group` its members and port as the tuner reads them), watches a measurement
against it (`while_serving`, `serving_watch`), lowers a drained one's scheduler
limits in place (`reconfigure`) and stops it. `zygote_status` says whether the study's zygote
failed in this process, and whether its servers are exec'd since (for the study's summary);
`zygote_pid` which process the zygote is (for a test that stops or kills it).
"""

from serving.process.launcher import command_line, launch, launch_spec
from serving.process.reconfiguration import KNOBS as RECONFIGURABLE
from serving.process.reconfiguration import Reconfiguration, reconfigure, within_start
from serving.process.server import ServerFailed, StopReport, VllmServer, set_aside
from serving.process.serving_watch import FirstTokenWatch, while_serving
from serving.process.zygote_pool import ZygoteFailure, ZygoteStatus
from serving.process.zygote_pool import current_pid as zygote_pid
from serving.process.zygote_pool import status as zygote_status

__all__ = [
    "RECONFIGURABLE",
    "FirstTokenWatch",
    "Reconfiguration",
    "ServerFailed",
    "StopReport",
    "VllmServer",
    "ZygoteFailure",
    "ZygoteStatus",
    "command_line",
    "launch",
    "launch_spec",
    "reconfigure",
    "set_aside",
    "while_serving",
    "within_start",
    "zygote_pid",
    "zygote_status",
]
