"""serving describes a server and starts none (the scenario, the space, the pure
calibration and the outputs import it); serving.process is what starts one. One start
timeout for every server the tuner starts."""

import dataclasses
import inspect


def test_every_start_timeout_defaults_to_the_one_constant(tmp_path):
    from search.executor import VllmExecutor
    from search.scenario import ServerSection
    from serving import DEFAULT_STARTUP_TIMEOUT_S
    from serving.process.launcher import launch, launch_spec
    from serving.process.server import LaunchSpec

    defaults = {
        "scenario server.startup_timeout_s": ServerSection().startup_timeout_s,
        "LaunchSpec": LaunchSpec(model=None, args=[], log_path=tmp_path / "server.log").startup_timeout_s,
        "launch": inspect.signature(launch).parameters["startup_timeout_s"].default,
        "launch_spec": inspect.signature(launch_spec).parameters["startup_timeout_s"].default,
        "VllmExecutor": next(f.default for f in dataclasses.fields(VllmExecutor) if f.name == "startup_timeout_s"),
    }
    # `is`, not ==: an equal number written again elsewhere is a second home for the same fact.
    assert {name: value is DEFAULT_STARTUP_TIMEOUT_S for name, value in defaults.items()} == dict.fromkeys(
        defaults, True
    )
    assert DEFAULT_STARTUP_TIMEOUT_S == 300.0
