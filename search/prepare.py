"""Everything checked and resolved before any server starts: the scenario, the search space on the
installed vLLM, the baselines, the fixed flags, where the study lives. Bad input fails here, with
one clear line, before the loop (search.study) starts anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select

from search import scenario as scenario_mod
from search import space as space_mod
from search.disk import DEFAULT_RUNS_DIR
from search.executor import plan_trial
from search.samplers import DEFAULT_SAMPLER, SAMPLERS, scenario_default
from search.scenario import Scenario
from serving import DEFAULT_MEMORY_UTILIZATION, LaunchContext, launch_context, model_study_label
from storage.database import check_url, check_writable_dir, existing_engine
from storage.tables import StudyRecord
from storage.url import redacted


@dataclass
class StudyOptions:
    scenario: str
    trials: int | None = None
    timeout_min: float | None = None
    model: str | None = None
    storage: str | None = None
    study_name: str | None = None
    sampler: str | None = None  # None: the scenario's default_sampler, else DEFAULT_SAMPLER
    seed: int = 0
    runs_dir: Path = DEFAULT_RUNS_DIR
    confirm_runs: int | None = None  # None: the scenario's confirmation.runs; 0: no confirmation phase
    recalibrate: bool = False  # measure the calibration again (a study without trials only)
    warm_start: str | None = (
        None  # an earlier study of the same storage: prior and a candidate (search.study.warm_start)
    )
    # The hardware's price an hour: over the scenario's cost.usd_per_hour, kept with the study
    # (search.study.price); None: the scenario's, or the one a run kept.
    usd_per_hour: float | None = None


@dataclass
class Prepared:
    """Everything checked and resolved before any server starts."""

    scenario: Scenario
    source: str
    shown: str
    ctx: LaunchContext
    dists: dict[str, space_mod.Distribution]
    space_notes: list[str]
    fixed: dict[str, Any]
    baselines: dict[str, dict[str, Any]]
    baseline_notes: list[str]
    study_name: str
    storage_url: str
    run_dir: Path
    sampler: str = DEFAULT_SAMPLER  # the name the study samples with (search.samplers)


def default_storage(runs_dir: Path) -> str:
    return f"sqlite:///{(runs_dir / 'autotune.db').resolve()}"


def default_study_name(scenario_name: str, model: str | Path | None) -> str:
    """One study per scenario and model: the same command resumes it."""
    return scenario_name if not model else f"{scenario_name}-{model_study_label(model)}"


def stored_scenario_source(storage_url: str, study_name: str) -> str | None:
    """The scenario source stored with study `study_name`, None if there is no such study. Creates
    nothing (no database file, no table) and reads one column, so a database begun by an older
    version is read as it is."""
    with existing_engine(storage_url) as engine:
        if engine is None:
            return None
        with engine.connect() as conn:
            return conn.scalar(select(StudyRecord.scenario_source).where(StudyRecord.study_name == study_name))


def check_stored_scenario(storage_url: str, study_name: str, base_dir: Path) -> None:
    """An existing study's stored scenario passes the checks a file does (raises ScenarioError).

    A worker runs the stored scenario and a resume is held to it, so whoever edits the database
    must not get a flag past them that a file could not carry."""
    source = stored_scenario_source(storage_url, study_name)
    if source is not None:
        scenario_mod.parse(
            source, f"the scenario stored with study {study_name!r} in {redacted(storage_url)}", base_dir
        )


def platform_essentials(ctx: LaunchContext, scenario: Scenario) -> dict[str, Any]:
    """What every server of the study gets, baselines included, unless the scenario says otherwise.

    On the CPU build: fp32 where bf16 is emulated (`context.serving_dtype`), and eager mode:
    a compiled start costs ~58 s cold vs ~37 s eager (benchmarks/bench_startup.py) and almost every
    trial is cold (max_num_seqs and max_num_batched_tokens key the compile cache), while
    compiled serving was only 4-12% faster. The exported config then says enforce-eager too,
    so what is deployed is what was measured.
    """
    essentials: dict[str, Any] = {"memory_utilization": DEFAULT_MEMORY_UTILIZATION}
    if ctx.dtype:
        essentials["dtype"] = ctx.dtype
    if not ctx.hardware.is_gpu:
        essentials["enforce_eager"] = True
    if not ctx.model.has_weights:  # config.json + tokenizer only: random weights, timing intact
        essentials["load_format"] = "dummy"
    for key in essentials.keys() & scenario.server.fixed.keys():
        essentials[key] = scenario.server.fixed[key]
    return essentials


def prepare(opts: StudyOptions, ctx: LaunchContext | None = None) -> Prepared:
    """Validate everything (scenario, space, baselines, model, vLLM) without starting a server.

    `ctx`: the installed vLLM, machine and model; by default probed here (tests pass one)."""
    scenario, source, shown = scenario_mod.load(opts.scenario)
    sampler = opts.sampler or scenario_default(scenario)
    if sampler not in SAMPLERS:
        raise scenario_mod.ScenarioError(
            f"{shown}: default_sampler: {sampler!r} is not a sampler; choose one of {', '.join(SAMPLERS)}"
        )
    check_writable_dir(opts.runs_dir, "--runs-dir")
    storage_url = default_storage(opts.runs_dir) if opts.storage is None else opts.storage  # "" is refused
    check_url(storage_url)
    study_name = opts.study_name or default_study_name(scenario.name, opts.model)
    check_stored_scenario(storage_url, study_name, scenario_mod.resolve_path(opts.scenario).parent.resolve())
    ctx = ctx or launch_context(opts.model)
    dists, notes = space_mod.active_space(scenario.search_space, ctx, where=shown)
    notes = [f"warning: {w}" for w in scenario_mod.flat_objective_warnings(scenario)] + notes
    essentials = platform_essentials(ctx, scenario)
    fixed = {**essentials, **scenario.server.fixed}
    longest = scenario.workload.longest_request_tokens()
    if scenario.workload.trace is not None:  # how many requests, and how to clip them, not only the longest
        context = fixed.get("max_model_len") or ctx.model.max_position_embeddings
        if (problem := scenario.workload.trace.beyond_context(context)) is not None:
            raise scenario_mod.ScenarioError(f"{shown}: {problem}")
    baselines, baseline_notes = {}, []
    shared = scenario.server.deployment()
    for name, values in scenario.baselines.items():
        # As written, on the scenario's deployment facts (scenario.sections.DEPLOYMENT_FACTS).
        config = {**essentials, **shared, **values}
        plan = plan_trial(-1, name, {}, config, ctx, longest, where=f"{shown}: baselines.{name}")
        baselines[name] = config
        for fact, (own, held) in scenario_mod.deployment_differences(values, shared).items():
            if fact in values and fact in shared:
                baseline_notes.append(
                    f"baseline {name}: {fact} {own} where every trial has {held} (server.fixed): "
                    f"compared as it runs, not like for like in {fact}"
                )
        for adj in plan.server_args.adjustments:
            baseline_notes.append(f"baseline {name}: {adj.param} {adj.action}: {adj.detail}")
        for problem in plan.problems:
            baseline_notes.append(f"baseline {name} cannot run here and will be recorded as failed: {problem}")
    # A fixed value vLLM would reject fails every trial: say it now.
    plan_trial(-1, None, {}, fixed, ctx, longest, where=f"{shown}: server.fixed")
    return Prepared(
        scenario,
        source,
        shown,
        ctx,
        dists,
        notes,
        fixed,
        baselines,
        baseline_notes,
        study_name,
        storage_url,
        opts.runs_dir / study_name,
        sampler,
    )
