"""`autotune report`: kept apart from search.report so the CLI does not import plotly to start."""

from __future__ import annotations

import argparse
from pathlib import Path


def _cmd_report(args: argparse.Namespace) -> int:
    from search.cli import _study_target
    from search.report import REPORT_NAME, write_report

    storage, name = _study_target(args)
    out = Path(args.out) if args.out else Path(getattr(args, "runs_dir", "runs")) / name / REPORT_NAME
    print(f"report: {write_report(storage, name, out)}")
    return 0


def register(sub) -> None:
    """`autotune report [SCENARIO] [--storage URL] [--study NAME] [--out FILE]`."""
    from search.cli import _add_study_target

    p = sub.add_parser("report", help="write the study's self-contained HTML report (plotly, offline)")
    _add_study_target(p)
    p.add_argument("--out", default=None, help="file (default: RUNS_DIR/STUDY/report.html)")
    p.set_defaults(func=_cmd_report)
