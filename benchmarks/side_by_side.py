"""Servers started side by side, measured one at a time: how a landscape is recorded on a GPU
within a short lease (`bench_landscape.py record --side-by-side K`).

A trial's server costs a start (30-60 s eager for an 8B model on vLLM 0.26, more compiled) that
measures nothing. On one GPU with room for K servers, the next K trials' servers start together,
each with its KV cache pinned in bytes (`kv_cache_memory_bytes`: no memory profiling, so a start
does not mistake a neighbour's weights for its own memory use); then each trial takes its own
and is measured while the others wait idle, holding memory but no compute. A trial's start
seconds are its own server's, started beside the others.

Only a benchmark does this: a study's trials start alone (`serving.process.launch`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from search.executor import plan_trial
from serving import LaunchContext, ServerArgs, process
from serving.process import VllmServer


def _key(ctx: LaunchContext, args: ServerArgs) -> tuple[str, ...]:
    return tuple(args.cli(ctx.installed))


class _Started:
    """A server whose start() already runs in a thread beside its wave's: start() waits for the
    whole wave (no measurement runs beside a start) and raises what this server's start raised;
    everything else is the server's."""

    def __init__(self, server: VllmServer, wave: list[threading.Thread]):
        self._server, self._error, self._wave = server, None, wave
        thread = threading.Thread(target=self._start, daemon=True)
        wave.append(thread)
        thread.start()

    def _start(self) -> None:
        try:
            self._server.start()
        except BaseException as e:  # raised in the trial's thread, where the executor handles it
            self._error = e

    def start(self) -> None:
        for thread in self._wave:
            thread.join()
        if self._error is not None:
            raise self._error

    def __enter__(self) -> _Started:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.stop()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


@dataclass
class SideBySide:
    """The executor's `launch`: on a server asked for that is not started yet, starts it and the
    servers of the next `size` - 1 configurations of `upcoming` together. `upcoming` holds every
    server the study will ask for, in its order (the calibration's first), each taken once; one a
    pre-start check rules out is skipped. `close()` stops any no trial took."""

    upcoming: list[dict[str, Any]]  # configurations, as the study plans them
    size: int
    longest_request: int
    pool_dir: Path
    _waiting: dict[tuple[str, ...], _Started] = field(default_factory=dict)
    waves: int = 0

    def __call__(
        self,
        ctx: LaunchContext,
        args: ServerArgs,
        log_path: Path,
        *,
        startup_timeout_s: float,
        env: dict[str, str] | None = None,
    ) -> VllmServer:
        key = _key(ctx, args)
        if key not in self._waiting:
            self._start_wave(ctx, args, startup_timeout_s, env)
        server = self._waiting.pop(key)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.unlink(missing_ok=True)
        log_path.symlink_to(server.spec.log_path.resolve())  # the trial's log, where the study looks
        return server

    def _start_wave(
        self, ctx: LaunchContext, args: ServerArgs, startup_timeout_s: float, env: dict[str, str] | None
    ) -> None:
        self.close()  # a server no trial took (a trial the study skipped) gives its memory back first
        planned = [plan_trial(-1, None, {}, config, ctx, self.longest_request, "landscape") for config in self.upcoming]
        keys = [_key(ctx, p.server_args) for p in planned]
        asked = _key(ctx, args)
        if asked in keys:
            del planned[keys.index(asked)], keys[keys.index(asked)]
        wave, left = {asked: args}, []
        for p, key in zip(planned, keys):
            if len(wave) < self.size and not p.problems and key not in wave:
                wave[key] = p.server_args
            elif not p.problems:
                left.append(p)
        self.upcoming = [p.config for p in left]
        self.waves += 1
        threads: list[threading.Thread] = []
        for i, (key, a) in enumerate(wave.items()):
            spec = process.launch_spec(  # the function (serving.process has a module of that name too)
                ctx,
                a,
                self.pool_dir / f"wave{self.waves:02d}-{i}.server.log",
                startup_timeout_s=startup_timeout_s,
                env=env,
            )
            self._waiting[key] = _Started(VllmServer(spec, alone_on_gpu=False), threads)

    def close(self) -> None:
        for server in self._waiting.values():
            try:
                server.start()
            except Exception:  # failed to start: stopped already
                continue
            server.stop()
        self._waiting.clear()
