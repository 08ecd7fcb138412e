"""The tuner's own vLLM plugin: the only code the tuner loads into a server, and only into the
servers it starts.

It has no entry point: vLLM never finds it by itself (its `vllm.general_plugins` group and
VLLM_PLUGINS never name it), so every other vLLM in the same environment, such as a production
image the tuner is installed into, runs without it. The tuner's own entry (`autotune_vllm_entry`,
run by the tuner's command line or forked by the study's zygote) calls `activate` in the API
server before vLLM runs, and `activate` does nothing unless the server's environment has
`ENV=1`, which the tuner sets for its own servers (`LaunchSpec.plugin`) and nothing a scenario or
a stored study says can set. The EngineCore is forked from that API server on a GPU
(VLLM_WORKER_MULTIPROC_METHOD=fork) and inherits it; on the CPU build the EngineCore and its
worker, forked from the tuner entry's forkserver, activate it themselves (their environment is
the API server's); where vLLM spawns the EngineCore instead, the plugin is not there and the
start is an unmodified one.

Each concern is a module of this package with `install(say)`, listed in CONCERNS: it patches the
vLLM it finds, guarded (a patch applies only where its target exists with the shape it expects,
and otherwise says once in the server log that it did nothing): `warmups`, and the live
reconfiguration of a drained server's scheduler limits (`reconfigure`: an EngineCore utility;
`route`: the API server's route to it).

Imported by path in the server's Python: standard library only at import (vLLM is imported by the
concerns, when vLLM imports the module they patch).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Mapping

ENV = "AUTOTUNE_VLLM_PLUGIN"
CONCERNS = ("warmups", "reconfigure", "route")
# vLLM configures the "vllm" logger: lines under it carry its format and, in a child process, the
# process's prefix, like every other line of the server log.
LOGGER = logging.getLogger("vllm.autotune_plugin")
_said: set[str] = set()
_active: list[str] = []


def say(message: str) -> None:
    """One line in the server log, once per process."""
    if message not in _said:
        _said.add(message)
        LOGGER.info("autotune plugin: %s", message)


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get(ENV) == "1"


def activate(environ: Mapping[str, str] = os.environ) -> list[str]:
    """Install every concern, where the tuner turned the plugin on; the concerns installed."""
    if not enabled(environ) or _active:
        return list(_active)
    for name in CONCERNS:
        importlib.import_module(f"{__name__}.{name}").install(say)
        _active.append(name)
    return list(_active)
