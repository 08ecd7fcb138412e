"""A study run by many workers at once, as the command line starts it.

`search_on_workers` is `autotune search --workers N`: the study created here, then N `autotune
worker` processes on disjoint device slots of this machine (or one Ray task per slot), then,
once they are done, the confirmation phase here. `run_worker` is `autotune worker`: one more
worker joining a study from any host that reaches its database. The workers coordinate through
the study's database (`search.study.coordination`); placing them is `app.workers`.
"""

from __future__ import annotations

import os

from rich.console import Console

from app import workers
from app.outputs import DashboardPublisher, StudyProgress
from app.worker_options import WorkerOptions
from search.prepare import Prepared, StudyOptions, prepare
from search.study import StudyResult, StudyRunner
from search.study.coordination import Coordination
from search.study.outage import DEFAULT_BOUND_S
from storage.queries import check_url
from storage.url import PasswordInArgv, redacted, single_writer


class WorkersStopped(RuntimeError):
    """Workers that exited with an error (`failed`: "[prefix] exit CODE" each); `interrupted`:
    every one of them was stopped by a signal (Ctrl-C), not by a fault."""

    def __init__(self, failed: list[str], interrupted: bool):
        super().__init__("; ".join(failed))
        self.failed = failed
        self.interrupted = interrupted


def search_on_workers(
    opts: StudyOptions,
    n: int,
    console: Console,
    *,
    backend: str = "local",
    ray_address: str | None = None,
    db_outage_s: int = DEFAULT_BOUND_S,
) -> Prepared:
    """The search on `n` workers, then the confirmation phase; returns the prepared study (where
    its outputs go). Refused (SlotError) before anything starts without a shared database, or
    when the devices or ray are not there; WorkersStopped when a worker stopped early."""
    if opts.storage == "":
        check_url(opts.storage)  # refused as empty, not taken for the default SQLite file
    storage = opts.storage or ""
    if not storage or single_writer(storage):
        raise workers.SlotError(
            f"--workers {n} needs a database server the workers share; SQLite "
            f"({storage or 'the default runs/autotune.db'}) takes one worker per study. Run `make db` "
            f"(autotune db start) and pass the URL it prints: make search WORKERS={n} STORAGE='<URL>'"
        )
    try:
        secret = workers.worker_env(storage)  # the password, if the URL has one: not on their command lines
    except PasswordInArgv as e:
        raise workers.SlotError(str(e)) from None
    if backend == "ray":
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
    coordination = Coordination(db_outage_s=db_outage_s)
    runner = StudyRunner(prep, opts, coordination=coordination)
    runner.open()  # the schema and the study, once, before the workers join it
    console.print(
        f"study [bold]{prep.study_name}[/] ({prep.shown}) on {prep.ctx.installed.label()}, "
        f"{hw.describe()}; storage {redacted(prep.storage_url)}; {n} workers on "
        f"{', '.join(s.label for s in slots)}"
    )
    given = WorkerOptions(
        storage=prep.storage_url,
        study=prep.study_name,
        runs_dir=opts.runs_dir,
        scenario=opts.scenario or None,
        model=opts.model or None,
        trials=runner.budget,
        timeout_min=opts.timeout_min or None,
        sampler=prep.sampler,
        db_outage_s=db_outage_s,
    )
    commands = [
        (f"[w{i} {slot.label}]", workers.worker_argv(given.model_copy(update={"seed": opts.seed + i}), slot))
        for i, slot in enumerate(slots)
    ]
    if backend == "ray":
        codes = workers.run_all_on_ray(commands, slots, ray_address, env=secret)
    else:
        codes = workers.run_all(commands, lambda line: console.print(line, markup=False, highlight=False), env=secret)
    failed = [f"{prefix} exit {code}" for (prefix, _), code in zip(commands, codes) if code]
    if failed:
        raise WorkersStopped(failed, interrupted=all(code == 130 for code in codes if code))
    confirm = StudyRunner(prep, opts, observers=[StudyProgress(console)], coordination=coordination)
    if confirm.confirm_runs > 0:
        confirm.run(search=False)
    return prep


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
    runner = StudyRunner(
        prep,
        opts,
        observers=[StudyProgress(console), DashboardPublisher()],
        coordination=Coordination(slot=slot.label if slot else None, db_outage_s=options.db_outage_s),
    )
    return runner.run()
