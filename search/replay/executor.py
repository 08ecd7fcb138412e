"""The replay executor: a `TrialExecutor` that starts no server and answers each plan from a
surrogate fitted on a recorded landscape, with noise drawn from the landscape's repeats.

Deterministic per seed: a trial's noise is drawn from (seed, trial number, run name), so the same
study replays the same numbers, and each confirmation run (its own run name) gets fresh ones.
The real `StudyRunner` runs on it unchanged: `executor=replay_factory(surrogate, seed)`,
`calibrate=replay_calibration(landscape)`, and a launch context from `replay_context`.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadgen import CLIENT_BEHIND, json_safe
from objectives.capacity import TARGET_ABORTED, CapacityEstimate
from search.calibration import CalibrationResult
from search.executor import Measurement, PhaseCallback, Timings, TrialOutcome, TrialPlan
from search.replay.landscape import CAPACITY, Landscape
from search.replay.surrogate import Surrogate
from serving import (
    REGISTRY,
    Failure,
    FailureClass,
    FailurePhase,
    FlagInfo,
    Hardware,
    InstalledVllm,
    LaunchContext,
    ModelInfo,
)
from storage.tables import TrialStatus

# The built-in CPU model's shape: what the pre-start checks do their memory arithmetic on.
REPLAY_MODEL = ModelInfo(
    path=Path("/replay/model"),
    architecture="LlamaForCausalLM",
    max_position_embeddings=8192,
    num_layers=4,
    num_kv_heads=4,
    head_dim=64,
    config_dtype="float32",
    has_weights=True,
    built_here=True,
)


def rng_for(seed: int, plan: TrialPlan) -> np.random.Generator:
    """The noise of one run of one trial: the same for the same (seed, trial, run), fresh for another run."""
    return np.random.default_rng([seed, max(plan.number, 0), zlib.crc32(plan.log_dir.encode())])


@dataclass
class ReplayExecutor:
    surrogate: Surrogate
    measurement: Measurement | None  # the study's (its capacity search's stage count)
    seed: int

    def run(self, plan: TrialPlan, on_phase: PhaseCallback = lambda _: None) -> TrialOutcome:
        command = f"replay {json_safe(plan.server_args.flags)}"
        if plan.problems:
            return TrialOutcome(
                TrialStatus.FAILED,
                Failure(FailureClass.INVALID_CONFIG, "; ".join(plan.problems), phase=FailurePhase.PRECHECK),
                command=command,
            )
        on_phase("starting")
        timings = self._timings()
        if not self.surrogate.serves(plan.config):
            cls = FailureClass(self.surrogate.failure_class or FailureClass.OTHER.value)
            return TrialOutcome(
                TrialStatus.FAILED,
                Failure(cls, "replayed: this config did not serve in the landscape", phase=FailurePhase.STARTUP),
                timings=Timings(start_s=timings.start_s, total_s=timings.start_s),
                command=command,
            )
        on_phase("load")
        metrics = self.surrogate.draw(plan.config, rng_for(self.seed, plan))
        metrics.update({TARGET_ABORTED: 0.0, "completed": 1.0, "failed": 0.0, CLIENT_BEHIND: 0.0})
        on_phase("stopping")
        return TrialOutcome(
            TrialStatus.OK,
            metrics=metrics,
            timings=timings,
            command=command,
            capacity=self._capacity(metrics.get(CAPACITY)),
        )

    def _capacity(self, rps: float | None) -> CapacityEstimate | None:
        """The drawn capacity inside an interval as wide as the landscape's typical one (the fit's
        where the landscape recorded fits, else the bracket), found by a search that used the
        study's whole stage budget."""
        if rps is None:
            return None
        half = math.sqrt(self.surrogate.bracket_ratio)
        low, high = rps / half, rps * half
        capacity = self.measurement.capacity if self.measurement is not None else None
        stages = 1 + (capacity.max_stages if capacity else 0)
        if self.surrogate.fitted:
            return CapacityEstimate(
                rps, low, high, stages, f"{rps:.3g} req/s [{low:.3g}, {high:.3g}] (replayed fit)", None, low, high
            )
        return CapacityEstimate(
            rps, low, high, stages, f"{rps:.3g} req/s (replayed: met at {low:.3g}, violated at {high:.3g})"
        )

    def _timings(self) -> Timings:
        total, start = self.surrogate.landscape.typical_trial_s()
        return Timings(start_s=start, load_s=total - start, total_s=total)


def replay_factory(surrogate: Surrogate, seed: int) -> Callable[[LaunchContext, Measurement], ReplayExecutor]:
    """What `StudyRunner(executor=...)` takes: a replay executor on the study's measurement."""
    return lambda ctx, measurement: ReplayExecutor(surrogate, measurement, seed)


def replay_calibration(landscape: Landscape):
    """What `StudyRunner(calibrate=...)` takes: the landscape's recorded calibration, measured on nothing."""

    def calibrate(scenario, ctx, baseline, run_dir, on_phase=lambda _: None) -> CalibrationResult:
        on_phase("replayed calibration")
        return CalibrationResult.from_dict(landscape.calibration)

    return calibrate


def _installed(version: str) -> InstalledVllm:
    """A vLLM that accepts every flag the registry knows (the replay starts none)."""
    flags = {}
    for spec in REGISTRY.values():
        if spec.flag is None:  # rendered per device: its flags are among those below
            continue
        for opt in (spec.flag, "--no-" + spec.flag[2:]) if spec.kind == "bool" else (spec.flag,):
            flags[opt] = FlagInfo((opt,), opt[2:].replace("-", "_"), None, None, None, spec.kind == "bool")
    for opt in ("--kv-cache-memory-bytes", "--gpu-memory-utilization", "--dtype", "--load-format"):
        flags[opt] = FlagInfo((opt,), opt[2:].replace("-", "_"), None, None, None, False)
    return InstalledVllm(dist="vllm-replay", version=version, flags=flags)


def replay_context(landscape: Landscape) -> LaunchContext:
    """The launch context a replayed study plans its trials on: the landscape's vLLM version, its
    GPUs where it was recorded on GPUs (else a CPU), the built-in model, a 1 GiB KV budget."""
    version = str(landscape.provenance.get("vllm_version", "0.32.0")).split()[-1]
    recorded = Hardware.from_dict(landscape.provenance.get("hardware"))
    hardware = recorded if recorded.gpus else Hardware(device="cpu", cpu_model="replay", cpu_cores=2, ram_gib=24)
    return LaunchContext(
        installed=_installed(version), hardware=hardware, model=REPLAY_MODEL, cpu_kv_budget_bytes=2**30, dtype="float32"
    )
