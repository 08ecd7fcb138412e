"""Outputs: what a user reads, built only from what storage holds.

The terminal (`progress` while a study runs, `summary` at its end), `best.yaml` and
`pareto.yaml` (`export`), the self-contained HTML report (`report`, `figures`), and the
optuna-dashboard pages (`dashboard`). They all read one read model: `read_model` reads a study
back from storage once (`LoadedStudy`), `trial_views` makes one view per stored trial of it, in
exactly one category, and `confirmation_rows` the confirmation table's rows; `verdict_text`
writes the confirmation phase's verdict in the words all of them quote, `verdict_basis` what its
numbers rest on, and `calibration_text` the calibration's references. `format` is the one
number formatter. Nothing here starts a server (a contract in pyproject.toml says so). The
study loop never imports this package; it reaches the terminal and the dashboard through
`search.study.events` subscribers that the CLI wires in.
"""

from app.outputs.dashboard import DashboardPublisher, publish_and_serve
from app.outputs.export import export as export_study
from app.outputs.format import fmt_value
from app.outputs.progress import StudyProgress
from app.outputs.read_model import LoadedStudy, load_study
from app.outputs.report import REPORT_NAME, write_report
from app.outputs.summary import confirmation_table, finish, summary_table, verdict_lines

__all__ = [
    "REPORT_NAME",
    "DashboardPublisher",
    "LoadedStudy",
    "StudyProgress",
    "confirmation_table",
    "export_study",
    "finish",
    "fmt_value",
    "load_study",
    "publish_and_serve",
    "summary_table",
    "verdict_lines",
    "write_report",
]
