"""`autotune scenario from-trace`: a scenario file made from a request log; `autotune tune`: the
same, then the study on it, for a user who does not want to write YAML (docs/traces.md)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from app.cli.arg_types import minutes, positive_int
from search.disk import DEFAULT_RUNS_DIR

if TYPE_CHECKING:
    from rich.console import Console

    from app.cli.arg_types import Subcommands
    from app.parallel import SearchOptions

OBJECTIVE_HELP = (
    "latency: the best TTFT tail first; throughput: the highest request rate within the SLOs "
    "first; balanced: the knee of the front (default: the closest shipped scenario's objectives)"
)


@dataclass(frozen=True)
class FromTraceOptions:
    """`autotune scenario from-trace`: the trace, the scenario file written from it, and what
    shapes the scenario (None: the closest shipped scenario's)."""

    trace: Path
    out: Path
    objective: str | None = None
    context: int | None = None


@dataclass(frozen=True)
class TuneOptions:
    """`autotune tune`: the scenario written from the trace, then `autotune search` on it."""

    scenario: FromTraceOptions
    search: SearchOptions


def from_trace_options(args: argparse.Namespace) -> FromTraceOptions:
    """The options of from-trace, and of tune's first step (the same flags): the scenario file
    by default is the trace's name with .yaml, in the current directory."""
    from search.trace_scenario import scenario_name

    out = args.out if args.out is not None else Path.cwd() / f"{scenario_name(args.trace)}.yaml"
    return FromTraceOptions(args.trace, out, args.objective, args.context)


def tune_options(args: argparse.Namespace) -> TuneOptions:
    """`autotune tune`'s options: the search on the scenario written takes the scenario's
    sampler, seed 0, no warm start and no price of its own, in one process."""
    from app.parallel import SearchOptions
    from search.prepare import StudyOptions

    scenario = from_trace_options(args)
    study = StudyOptions(
        scenario=str(scenario.out),
        trials=args.trials,
        timeout_min=args.timeout_min,
        model=args.model,
        storage=args.storage,
        study_name=args.study,
        runs_dir=Path(args.runs_dir),
        confirm_runs=args.confirm_runs,
    )
    return TuneOptions(scenario, SearchOptions(study, db_outage_s=args.db_outage_s))


def _write_scenario(opts: FromTraceOptions, console: Console) -> Path:
    """Build, print what the trace holds, write; the path written."""
    from rich.markup import escape

    from search.disk import write_atomic
    from search.session_scenario import scenario_from_trace
    from search.trace_scenario import OBJECTIVES

    if opts.objective is not None and opts.objective not in OBJECTIVES:  # argparse checks; kept for direct callers
        raise ValueError(f"--objective {opts.objective!r}: choose one of {', '.join(OBJECTIVES)}")
    out = opts.out
    text, _ = scenario_from_trace(opts.trace, out, opts.objective, opts.context)  # a replay, or sessions fitted
    for line in text.splitlines():  # the file's head: what the trace holds, how its bounds were set
        if not line.startswith("# "):
            break
        console.print(escape(line[2:]), highlight=False)
    write_atomic(out, text)
    console.print(f"wrote [bold]{escape(str(out))}[/]: tune for it with `make search SCENARIO={escape(str(out))}`")
    return out


def _cmd_from_trace(args: argparse.Namespace) -> int:
    from app.cli.terminal import make_console

    _write_scenario(from_trace_options(args), make_console())
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    """from-trace, then `autotune search` on the scenario written."""
    from app.cli.studies import run_search
    from app.cli.terminal import make_console

    options = tune_options(args)
    _write_scenario(options.scenario, make_console())
    return run_search(options.search)


def _add_trace_args(p: argparse.ArgumentParser) -> None:
    from search.trace_scenario import OBJECTIVES

    p.add_argument(
        "--objective", choices=OBJECTIVES, default=None, metavar="{" + ",".join(OBJECTIVES) + "}", help=OBJECTIVE_HELP
    )
    p.add_argument(
        "--context",
        type=positive_int,
        default=None,
        metavar="TOKENS",
        help="the served context (max_model_len): longer requests are clipped to it, and counted "
        "(default: the closest shipped scenario's max_model_len)",
    )


def register_scenario(sub: Subcommands) -> None:
    scenario = sub.add_parser("scenario", help="make a scenario file (from-trace: from a request log)")
    group = scenario.add_subparsers(dest="scenario_command", required=True)
    p = group.add_parser(
        "from-trace",
        help="a scenario that replays a trace, and what the trace holds (rate, lengths, bursts, prefixes, sessions)",
        description="Formats: our JSONL, the Azure LLM inference trace CSV, BurstGPT's CSV, Mooncake's "
        "JSONL (docs/traces.md). The scenario replays the trace's own arrival pattern at a fraction of "
        "the measured capacity; its SLOs, search space and baselines are the closest shipped scenario's. "
        "A trace of multi-turn sessions (our JSONL's session_id and turn, or a ShareGPT file of "
        "conversations) gives a sessions workload fitted to them instead.",
    )
    p.add_argument("trace", type=Path, help="the trace file")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="SCENARIO.yaml",
        help="where to write it (default: the trace's name with .yaml, in the current directory)",
    )
    _add_trace_args(p)
    p.set_defaults(func=_cmd_from_trace)


def register_tune(sub: Subcommands) -> None:
    from app.cli.study_target import DEFAULT_STORAGE_HELP, add_db_outage, study_name

    p = sub.add_parser(
        "tune",
        help="from-trace and search in one: tune a model for the traffic of a trace file",
        description="`autotune scenario from-trace TRACE --out SCENARIO`, then `autotune search SCENARIO`.",
    )
    p.add_argument("--trace", type=Path, required=True, help="the trace file (docs/traces.md: formats)")
    p.add_argument(
        "--model",
        default=None,
        help="local model directory, or Hugging Face id org/name[@revision] found in the local cache "
        "(default: the built-in model)",
    )
    _add_trace_args(p)
    p.add_argument(
        "--out", type=Path, default=None, metavar="SCENARIO.yaml", help="the scenario file written (as from-trace)"
    )
    p.add_argument("--trials", type=positive_int, default=None, help="budget in finished trials (baselines included)")
    p.add_argument("--timeout-min", type=minutes, default=None, help="wall-time budget of the search phase")
    p.add_argument(
        "--confirm-runs", type=positive_int, default=None, metavar="N", help="runs per candidate in the confirmation"
    )
    p.add_argument("--storage", default=None, help=DEFAULT_STORAGE_HELP)
    p.add_argument("--study", default=None, type=study_name, help="study name (default: scenario[-model])")
    p.add_argument("--runs-dir", default=str(DEFAULT_RUNS_DIR), help="where logs, exports and the default database go")
    add_db_outage(p)
    p.set_defaults(func=_cmd_tune)
