"""The one way to a vLLM server for a set of flags (`launch`): on the context's model, bound to
127.0.0.1, with the GPU-memory-release check wherever the context is a GPU host. Study,
calibration and benchmarks all start their servers there (`launch_spec`: what it starts;
`command_line`: the command a user would type).

Its own room, over `serving.process.server`, because it reads the tuner's context and flags,
which a server's start (`VllmServer`, what a `LaunchSpec` describes) does not."""

from __future__ import annotations

import shlex
from pathlib import Path

from serving.failures import DEFAULT_STARTUP_TIMEOUT_S
from serving.process.launch_spec import LaunchSpec
from serving.process.server import VllmServer
from serving.server_flags import LaunchContext, ServerArgs


def launch_spec(
    ctx: LaunchContext,
    args: ServerArgs,
    log_path: Path,
    *,
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
    env: dict[str, str] | None = None,
) -> LaunchSpec:
    return LaunchSpec(
        model=ctx.model.path,
        args=args.cli(ctx.installed),
        log_path=log_path,
        env=dict(env or {}),
        startup_timeout_s=startup_timeout_s,
        gpu=ctx.hardware.is_gpu,
    )


def launch(
    ctx: LaunchContext,
    args: ServerArgs,
    log_path: Path,
    *,
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
    env: dict[str, str] | None = None,
) -> VllmServer:
    """A server not yet started: `with launch(...) as server:` or `.start()` / `.stop()`."""
    return VllmServer(launch_spec(ctx, args, log_path, startup_timeout_s=startup_timeout_s, env=env))


def command_line(ctx: LaunchContext, args: ServerArgs) -> str:
    """The server's command as a user would type it (on port 8000 rather than a random one)."""
    spec = launch_spec(ctx, args, Path("-"))
    return shlex.join(["python", *spec.command(port=8000, lean=False)[1:]])
