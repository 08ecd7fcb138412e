"""The commands that read a stored study and write or serve what it shows: `autotune export`
(best.yaml, pareto.yaml, report.html), `autotune report` (the HTML report) and `autotune dashboard`."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.cli.arg_types import port_number
from app.cli.common import add_study_target, finish_outputs, make_console, study_target


def _cmd_export(args: argparse.Namespace) -> int:
    storage, name = study_target(args)
    out = Path(args.out) if args.out else Path(args.runs_dir) / name
    return finish_outputs(make_console(), storage, name, out)


def _cmd_dashboard(args: argparse.Namespace) -> int:
    from app.outputs import publish_and_serve  # figures and notes, then serves on 127.0.0.1

    storage, name = study_target(args, whole_database=True)
    return publish_and_serve(storage, name, port=args.port)


def _cmd_report(args: argparse.Namespace) -> int:
    from app.outputs import REPORT_NAME, write_report

    storage, name = study_target(args)
    out = Path(args.out) if args.out else Path(args.runs_dir) / name / REPORT_NAME
    print(f"report: {write_report(storage, name, out)}")
    return 0


def register_export(sub) -> None:
    exp = sub.add_parser(
        "export",
        help="write best.yaml (for vllm serve --config), pareto.yaml and report.html again from the stored study",
    )
    add_study_target(exp)
    exp.add_argument("--out", default=None, help="directory (default: runs/STUDY)")
    exp.set_defaults(func=_cmd_export)


def register_dashboard(sub) -> None:
    dash = sub.add_parser("dashboard", help="optuna-dashboard on the study database, bound to 127.0.0.1")
    add_study_target(dash)
    dash.add_argument("--port", type=port_number, default=8080, help="on 127.0.0.1 (make dashboard PORT=)")
    dash.set_defaults(func=_cmd_dashboard)


def register_report(sub) -> None:
    report = sub.add_parser("report", help="write the study's self-contained HTML report (plotly, offline)")
    add_study_target(report)
    report.add_argument("--out", default=None, help="file (default: RUNS_DIR/STUDY/report.html)")
    report.set_defaults(func=_cmd_report)
