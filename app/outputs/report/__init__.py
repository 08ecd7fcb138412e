"""One self-contained HTML file per study: open it anywhere, offline (plotly.js is inlined).

Top: the recommendation and its gain over each baseline, in plain words. Then the confirmation
phase (the verdict on re-measured candidates with intervals and run counts, every run, the
run-to-run noise, and the calibration reference with its spread), what limited the trials, the Pareto front (feasible / infeasible / failed told apart, baselines marked), the
hypervolume history from the stored front snapshots, parameter importances, each objective
against each parameter, latency against rate over each trial's load stages (when trials ran a
capacity search), and a sortable table of every trial with its metrics, failure class
and diagnosis.

Modules: `page` (the sections in order, writing the file), `confirmation` and `trials` (their
sections), `markup` (the HTML pieces they share).
"""

from app.outputs.report.page import REPORT_NAME, build_html, searched_params, write_report

__all__ = ["REPORT_NAME", "build_html", "searched_params", "write_report"]
