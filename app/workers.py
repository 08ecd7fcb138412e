"""Many workers of one study on this machine (`autotune search --workers N`): each a process of
its own (`autotune worker`) on a disjoint device slot, their output interleaved line by line
under a prefix. The workers coordinate through the study's database (`search.study.coordination`),
not through this parent: it only places them, shows them and waits (`app.parallel` runs that
flow, and `autotune worker`'s).
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO

from app.worker_options import JoinedStudy, WorkerOptions
from storage.url import for_child

GPU, CPU = "gpu", "cpu"
DEVICE_LOCK_DIR_ENV = "AUTOTUNE_DEVICE_LOCK_DIR"  # default: the system's temporary directory


class SlotError(ValueError):
    """A slot that cannot be: bad text, or more workers than the machine has devices."""


def _ids_text(ids: Sequence[int]) -> str:
    """(0, 1, 2, 5) -> '0-2,5' (the kernel's and vLLM's list format)."""
    parts, run = [], [ids[0]]
    for i in ids[1:]:
        if i == run[-1] + 1:
            run.append(i)
        else:
            parts.append(run)
            run = [i]
    parts.append(run)
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in parts)


@dataclass(frozen=True)
class Slot:
    """The devices one worker owns: GPUs (CUDA_VISIBLE_DEVICES) or CPU cores (the worker, its
    servers and its load client pinned to them; the server's OpenMP threads bound to them)."""

    kind: str
    devices: tuple[int, ...]

    @property
    def label(self) -> str:
        return f"{self.kind} {_ids_text(self.devices)}"

    @property
    def arg(self) -> str:
        return f"{self.kind}:{_ids_text(self.devices)}"

    @classmethod
    def parse(cls, text: str) -> Slot:
        """'cpu:0-3' or 'gpu:2,3'."""
        kind, _, ids = text.partition(":")
        try:
            devices: set[int] = set()
            for part in ids.split(","):
                lo, _, hi = part.partition("-")
                devices.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            devices = set()
        if kind not in (CPU, GPU) or not devices or min(devices) < 0:
            raise SlotError(f"--slot {text!r}: expected cpu:IDS or gpu:IDS, IDS like 0-3 or 2,3")
        return cls(kind, tuple(sorted(devices)))

    def env(self) -> dict[str, str]:
        """What the worker's vLLM servers inherit. On the CPU build the OpenMP threads take the
        slot's cores but the first, which the API server, the engine core and the load client
        share; a one-core slot shares that core."""
        if self.kind == GPU:
            return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, self.devices))}
        compute = self.devices[1:] or self.devices
        return {"VLLM_CPU_OMP_THREADS_BIND": _ids_text(compute)}

    def apply(self) -> None:
        """This process (the worker: its load client and every server it starts) on the slot."""
        os.environ.update(self.env())
        if self.kind == CPU and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, set(self.devices))


def hold(slot: Slot, study: str) -> list[IO[str]]:
    """Each of the slot's devices locked for as long as the returned files stay open (at the
    latest until the process ends, however it ends): a worker of another study, or of another
    tuner, on the same devices is refused, since their measurements would skew each other's."""
    where = Path(os.environ.get(DEVICE_LOCK_DIR_ENV) or tempfile.gettempdir()) / "autotune-devices"
    where.mkdir(parents=True, exist_ok=True)
    held: list[IO[str]] = []
    for device in slot.devices:
        handle = open(where / f"{slot.kind}{device}.lock", "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            for h in held:
                h.close()
            raise SlotError(
                f"{slot.kind} {device} is in use by {holder}: trials side by side on the same "
                f"devices would skew each other's measurements; wait for it to finish, or give "
                f"this one other devices"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} (study {study})")
        handle.flush()
        held.append(handle)
    return held


def slots(n: int, gpus: int, cpus: Sequence[int]) -> list[Slot]:
    """`n` disjoint slots, as wide as the devices allow: GPUs where there are any, else cores."""
    if n < 1:
        raise SlotError(f"--workers {n}: must be 1 or more")
    if gpus:
        if n > gpus:
            raise SlotError(
                f"--workers {n}: this machine has {gpus} GPU(s) and each worker needs one of "
                f"its own; use --workers {gpus} or fewer"
            )
        width = gpus // n
        return [Slot(GPU, tuple(range(i * width, (i + 1) * width))) for i in range(n)]
    cores = sorted(cpus)
    if n > len(cores):
        raise SlotError(
            f"--workers {n}: {len(cores)} CPU core(s) available here and each worker needs one "
            f"of its own; use --workers {len(cores)} or fewer"
        )
    width = len(cores) // n
    return [Slot(CPU, tuple(cores[i * width : (i + 1) * width])) for i in range(n)]


def available_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def run_all(
    commands: Sequence[tuple[str, list[str]]], show: Callable[[str], None], env: Mapping[str, str] | None = None
) -> list[int]:
    """Start every (prefix, argv) at once, with `env` added to this environment (the database
    password: `worker_env`), show each output line as `prefix line`, wait for all; returns their
    exit codes. Ctrl-C reaches the workers through the terminal's process group; a SIGTERM to this
    parent is passed on to them. Either way this waits for them to stop their servers."""
    procs = [
        subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            env={**os.environ, **(env or {})},
        )
        for _, argv in commands
    ]
    lock = threading.Lock()

    def pump(prefix: str, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None  # stdout=PIPE
        for line in proc.stdout:
            with lock:
                show(f"{prefix} {line.rstrip()}")

    readers = [threading.Thread(target=pump, args=(prefix, p), daemon=True) for (prefix, _), p in zip(commands, procs)]
    for t in readers:
        t.start()

    def forward(signum: int, frame: FrameType | None) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        while True:
            try:
                codes = [p.wait() for p in procs]
                break
            except KeyboardInterrupt:  # the workers got it too; wait for them to clean up
                continue
    finally:
        signal.signal(signal.SIGTERM, previous)
        for t in readers:
            t.join(timeout=5)
    return codes


def joined_study(storage: str, study: str, runs_dir: Path) -> JoinedStudy:
    """The stored scenario (a worker's host may not have the file: it is written to
    RUNS_DIR/STUDY/scenario.yaml as the study began with it), model path and budget."""
    import optuna
    from sqlalchemy.orm import Session

    from search.study import BUDGET_ATTR
    from serving import pinned_model
    from storage.database import check_url, open_db
    from storage.queries import existing_study_check, require_study

    check_url(storage)  # one line for an empty, malformed or unreachable URL, before anything starts
    existing_study_check(
        storage, study, "start it with `autotune search SCENARIO --storage URL --study NAME`, then add workers"
    )
    with Session(open_db(storage)) as session:
        rec = require_study(session, study)
        source, model = rec.scenario_source, pinned_model(rec.model_path, rec.model_revision)
    path = runs_dir / study / "scenario.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != source:
        path.write_text(source)
    budget = optuna.load_study(study_name=study, storage=storage).user_attrs.get(BUDGET_ATTR)
    return JoinedStudy(str(path), model, budget)


def worker_argv(options: WorkerOptions, slot: Slot) -> list[str]:
    """The command line of one `autotune worker`: its options as one JSON argument, everything
    `ps` may show, so the storage URL without its password (`worker_env` gives that). The slot
    is an argument of its own: on Ray it is rewritten to the GPUs the task was given."""
    shown = options.model_copy(update={"storage": for_child(options.storage)[0]})
    return [sys.executable, "-m", "app.cli", "worker", "--options", shown.model_dump_json(), "--slot", slot.arg]


def worker_env(storage: str) -> dict[str, str]:
    """What a worker's environment adds for `storage`: its password, if the URL has one (libpq's
    PGPASSWORD), never on the worker's command line. PasswordInArgv where only argv could take it."""
    return for_child(storage)[1]


def run_all_on_ray(
    commands: Sequence[tuple[str, list[str]]],
    slots: Sequence[Slot],
    address: str | None,
    env: Mapping[str, str] | None = None,
) -> list[int]:
    """As run_all, but each (prefix, argv) is a Ray task on an existing cluster (`address`; a
    local instance when None) holding its slot's resources: num_gpus for a GPU slot (Ray picks
    the GPUs and the worker's --slot is rewritten to them), num_cpus for a CPU slot. The task runs
    the same worker command, with `env` added to its node's environment (a task argument, not a
    command line), and prints its lines with the prefix; Ray forwards them here."""
    try:
        import ray
    except ImportError:
        raise SlotError("--backend ray needs ray: pip install -e '.[ray]'") from None

    @ray.remote(max_retries=0)
    def work(prefix: str, argv: list[str], env: dict[str, str]) -> int:
        if "--slot" in argv and argv[argv.index("--slot") + 1].startswith(GPU):
            argv = list(argv)
            argv[argv.index("--slot") + 1] = f"{GPU}:" + ",".join(str(int(g)) for g in ray.get_gpu_ids())
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env={**os.environ, **env}
        )
        assert proc.stdout is not None  # stdout=PIPE
        for line in proc.stdout:
            print(f"{prefix} {line.rstrip()}", flush=True)
        return proc.wait()

    ray.init(address=address, include_dashboard=False, log_to_driver=True)
    try:
        refs = [
            work.options(
                num_gpus=len(slot.devices) if slot.kind == GPU else 0,
                num_cpus=0 if slot.kind == GPU else len(slot.devices),
            ).remote(prefix, argv, dict(env or {}))
            for (prefix, argv), slot in zip(commands, slots)
        ]
        return list(ray.get(refs))
    finally:
        ray.shutdown()
