"""A study as the command line runs it (`SearchOptions`): in this process, or on many workers.

`run_here` is `autotune search` and `autotune confirm` in one process. `search_on_workers` is
`autotune search --workers N`: the study created here, then N `autotune worker` processes on
disjoint device slots of this machine (or one Ray task per slot), then, once they are done, the
confirmation phase here. `run_worker` is `autotune worker`: one more worker joining a study from
any host that reaches its database. Every `StudyRunner` they start is built by `_runner`. The
workers coordinate through the study's database (`search.study.coordination`); placing them is
`app.workers`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from rich.console import Console
from sqlalchemy.orm import Session

from app import workers
from app.outputs import DashboardPublisher, StudyProgress
from app.worker_options import WorkerOptions
from search.disk import DEFAULT_RUNS_DIR
from search.prepare import Prepared, StudyOptions, prepare
from search.study import StudyResult, StudyRunner
from search.study.coordination import DEFAULT_BOUND_S, Coordination
from search.study.events import StudyObserver
from storage import queries
from storage.database import check_url
from storage.queries import require_study
from storage.url import PasswordInArgv, redacted, single_writer


@dataclass(frozen=True)
class SearchOptions:
    """`autotune search`, and `autotune confirm` (`search` False: the confirmation phase alone,
    in this process): the study's options, and how the command runs it."""

    study: StudyOptions
    search: bool = True
    workers: int = 1  # more: `search_on_workers`
    backend: str = "local"  # the workers' processes: "local" here, or "ray" tasks
    ray_address: str | None = None  # an existing Ray cluster (None: a local Ray instance)
    db_outage_s: int = DEFAULT_BOUND_S
    dry_run: bool = False  # the plan and its cost, nothing started


class WorkersStopped(RuntimeError):
    """Workers that exited with an error (`failed`: "[prefix] exit CODE" each); `interrupted`:
    every one of them was stopped by a signal (Ctrl-C), not by a fault."""

    def __init__(self, failed: list[str], interrupted: bool):
        super().__init__("; ".join(failed))
        self.failed = failed
        self.interrupted = interrupted


def study_line(prep: Prepared) -> str:
    """What a run opens with: the study, its scenario, the vLLM build, the machine and the storage."""
    return (
        f"study [bold]{prep.study_name}[/] ({prep.shown}) on {prep.ctx.installed.label()}, "
        f"{prep.ctx.hardware.describe()}; storage {redacted(prep.storage_url)}"
    )


def _runner(
    prep: Prepared, opts: StudyOptions, coordination: Coordination, observers: Sequence[StudyObserver] = ()
) -> StudyRunner:
    """Every runner the command line starts, one construction: the real executor and calibration."""
    return StudyRunner(prep, opts, observers=observers, coordination=coordination)


def _shown(console: Console) -> list[StudyObserver]:
    """A study that runs trials here shows them as it runs (the terminal) and gives
    optuna-dashboard each trial's diagnosis and note."""
    return [StudyProgress(console), DashboardPublisher()]


def run_here(prep: Prepared, options: SearchOptions, console: Console) -> StudyResult:
    """The study in this process: the search (unless `options.search` is False), then the
    confirmation phase."""
    runner = _runner(prep, options.study, Coordination(db_outage_s=options.db_outage_s), _shown(console))
    return runner.run(search=options.search)


def search_on_workers(options: SearchOptions, console: Console) -> Prepared:
    """The search on `options.workers` workers, then the confirmation phase here; returns the
    prepared study (where its outputs go). Refused (SlotError) before anything starts without a
    shared database, or when the devices or ray are not there; WorkersStopped when a worker
    stopped early."""
    opts, n = options.study, options.workers
    secret = _shared_storage(opts.storage, n)
    if options.backend == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise workers.SlotError(
                "--backend ray needs ray, which is not installed: pip install -e '.[ray]'"
            ) from None
    prep = prepare(opts)  # every check before any server starts
    hw = prep.ctx.hardware
    slots = workers.slots(n, len(hw.gpus) if hw.is_gpu else 0, workers.available_cpus())
    for slot in slots:  # refused here, before anything starts, if another tuner has them
        for handle in workers.hold(slot, prep.study_name):
            handle.close()
    coordination = Coordination(db_outage_s=options.db_outage_s)
    runner = _runner(prep, opts, coordination)
    runner.open()  # the schema and the study, once, before the workers join it (--recalibrate: refused with trials)
    console.print(f"{study_line(prep)}; {n} workers on {', '.join(s.label for s in slots)}")
    if opts.recalibrate:
        _recalibrate_on_workers(prep, runner, console)
    given = WorkerOptions(
        storage=prep.storage_url,
        study=prep.study_name,
        runs_dir=opts.runs_dir,
        scenario=opts.scenario or None,
        model=opts.model or None,
        trials=runner.budget,
        timeout_min=opts.timeout_min or None,
        sampler=prep.sampler,
        db_outage_s=options.db_outage_s,
    )
    _run_workers(given, opts.seed, slots, options, console, secret)
    # On the calibration the workers measured: --recalibrate was theirs.
    confirm = _runner(prep, replace(opts, recalibrate=False), coordination, [StudyProgress(console)])
    if confirm.confirm_runs > 0:
        confirm.run(search=False)
    return prep


def _shared_storage(storage: str | None, n: int) -> Mapping[str, str]:
    """What the workers' environment adds for the study's database (its password, if the URL
    has one: not on their command lines); SlotError unless it is a server they can share."""
    if storage == "":
        check_url(storage)  # refused as empty, not taken for the default SQLite file
    storage = storage or ""
    if not storage or single_writer(storage):
        raise workers.SlotError(
            f"--workers {n} needs a database server the workers share; SQLite "
            f"({storage or f'the default {DEFAULT_RUNS_DIR}/autotune.db'}) takes one worker per study. Run "
            f"`make db` (autotune db start) and pass the URL it prints: make search WORKERS={n} STORAGE='<URL>'"
        )
    try:
        return workers.worker_env(storage)
    except PasswordInArgv as e:
        raise workers.SlotError(str(e)) from None


def _recalibrate_on_workers(prep: Prepared, runner: StudyRunner, console: Console) -> None:
    """--recalibrate on workers: the study's calibration dropped, under the study's claim, so that
    the workers measure a new one once, as for a new study: the first to take the claim measures,
    the others wait and reuse it. Each told to recalibrate would measure again in turn, and one
    that joined after the first trial was stored would be refused; told nothing, each would take
    the stored one. A calibration that fails leaves the study without one: the next run measures it."""
    if not prep.scenario.needs_calibration():
        console.print(f"--recalibrate: {prep.shown} has no relative load or bound; nothing to measure")
        return
    with Session(runner.engine) as session:
        study_id = require_study(session, prep.study_name).id
    with queries.claimed(runner.engine, study_id) as (_, rec):
        rec.calibration = None


def _run_workers(
    given: WorkerOptions,
    seed: int,
    slots: Sequence[workers.Slot],
    options: SearchOptions,
    console: Console,
    secret: Mapping[str, str],
) -> None:
    """One `autotune worker` per slot, each with `given` and a seed of its own (`seed` + its
    index), until all have stopped; WorkersStopped if any stopped early."""
    commands = [
        (f"[w{i} {slot.label}]", workers.worker_argv(given.model_copy(update={"seed": seed + i}), slot))
        for i, slot in enumerate(slots)
    ]
    if options.backend == "ray":
        codes = workers.run_all_on_ray(commands, slots, options.ray_address, env=secret)
    else:
        codes = workers.run_all(commands, lambda line: console.print(line, markup=False, highlight=False), env=secret)
    failed = [f"{prefix} exit {code}" for (prefix, _), code in zip(commands, codes) if code]
    if failed:
        raise WorkersStopped(failed, interrupted=all(code == 130 for code in codes if code))


def run_worker(options: WorkerOptions, console: Console, slot: workers.Slot | None = None) -> StudyResult:
    """One more worker on an existing study: the scenario, model and budget are the study's own
    unless `options` give them; on `slot`'s devices (held while it runs) when given; the seed,
    unless given, its process id."""
    joined = workers.joined_study(options.storage, options.study, options.runs_dir)
    opts = options.study_options(joined)
    if slot is not None:
        held = workers.hold(slot, options.study)  # noqa: F841 - held until this worker ends
        slot.apply()  # before anything starts: every server and the load client inherit it
    prep = prepare(opts)
    console.print(
        f"worker {os.getpid()} on {slot.label if slot else 'this machine'} joins study "
        f"[bold]{prep.study_name}[/] ({redacted(prep.storage_url)})"
    )
    coordination = Coordination(slot=slot.label if slot else None, db_outage_s=options.db_outage_s)
    return _runner(prep, opts, coordination, _shown(console)).run()
