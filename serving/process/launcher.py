"""The one way to a vLLM server for a set of flags: on the context's model, bound to 127.0.0.1,
with the GPU-memory-release check wherever the context is a GPU host. Study, calibration and
benchmarks all start their servers here."""

from __future__ import annotations

import shlex
from pathlib import Path

from serving.failure_kinds import DEFAULT_STARTUP_TIMEOUT_S
from serving.process.server import LaunchSpec, VllmServer
from serving.registry import LaunchContext, ServerArgs


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
