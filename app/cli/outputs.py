"""The commands that read a stored study and write or serve what it shows: `autotune export`
(best.yaml, pareto.yaml, report.html), `autotune report` (the HTML report) and `autotune dashboard`."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from app.cli.arg_types import port_number
from app.cli.study_target import add_study_target, named_study, stored_study
from app.cli.terminal import finish_outputs, make_console
from search.disk import DEFAULT_RUNS_DIR

if TYPE_CHECKING:
    from app.cli.arg_types import Subcommands
    from search.prepare import StudyOptions


@dataclass(frozen=True)
class OutputOptions:
    """`autotune export` and `autotune report`: the stored study, and where its outputs go (None:
    under the runs directory; export's is a directory, report's a file)."""

    study: StudyOptions
    out: Path | None = None


@dataclass(frozen=True)
class DashboardOptions:
    """`autotune dashboard`: the stored study (its database is served) and the port on 127.0.0.1."""

    study: StudyOptions
    port: int


def output_options(args: argparse.Namespace) -> OutputOptions:
    return OutputOptions(named_study(args), Path(args.out) if args.out else None)


def dashboard_options(args: argparse.Namespace) -> DashboardOptions:
    return DashboardOptions(named_study(args), args.port)


def _cmd_export(args: argparse.Namespace) -> int:
    opts = output_options(args)
    storage, name = stored_study(opts.study)
    out = opts.out or opts.study.runs_dir / name
    return finish_outputs(make_console(), storage, name, out)


def _cmd_dashboard(args: argparse.Namespace) -> int:
    from app.outputs import publish_and_serve  # figures and notes, then serves on 127.0.0.1

    opts = dashboard_options(args)
    storage, name = stored_study(opts.study, whole_database=True)
    return publish_and_serve(storage, name, port=opts.port)


def _cmd_report(args: argparse.Namespace) -> int:
    from app.outputs import REPORT_NAME, write_report

    opts = output_options(args)
    storage, name = stored_study(opts.study)
    out = opts.out or opts.study.runs_dir / name / REPORT_NAME
    print(f"report: {write_report(storage, name, out)}")
    return 0


def register_export(sub: Subcommands) -> None:
    exp = sub.add_parser(
        "export",
        help="write best.yaml (for vllm serve --config), pareto.yaml and report.html again from the stored study",
    )
    add_study_target(exp)
    exp.add_argument("--out", default=None, help=f"directory (default: {DEFAULT_RUNS_DIR}/STUDY)")
    exp.set_defaults(func=_cmd_export)


def register_dashboard(sub: Subcommands) -> None:
    dash = sub.add_parser("dashboard", help="optuna-dashboard on the study database, bound to 127.0.0.1")
    add_study_target(dash)
    dash.add_argument("--port", type=port_number, default=8080, help="on 127.0.0.1 (make dashboard PORT=)")
    dash.set_defaults(func=_cmd_dashboard)


def register_report(sub: Subcommands) -> None:
    report = sub.add_parser("report", help="write the study's self-contained HTML report (plotly, offline)")
    add_study_target(report)
    report.add_argument("--out", default=None, help="file (default: RUNS_DIR/STUDY/report.html)")
    report.set_defaults(func=_cmd_report)
