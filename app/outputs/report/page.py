"""The report page: its sections in order, its style and sorting script, and writing the file."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import yaml
from plotly.offline import get_plotlyjs
from sqlalchemy.orm import Session

from app.outputs import export, figures
from app.outputs.read_model import LoadedStudy, latency_slos, load_study
from app.outputs.recommendation import verdict
from app.outputs.report.confirmation_section import confirmation_section
from app.outputs.report.markup import esc, fig_html, mark
from app.outputs.report.trials_section import diagnosis_cell, metrics_table, trials_table
from app.outputs.trace_figure import trace_figure
from app.outputs.trial_views import FAILED, FEASIBLE, INFEASIBLE, TrialView
from objectives.diagnosis import Finding
from search.disk import DEFAULT_RUNS_DIR, write_atomic
from storage import database, queries
from storage.tables import ParetoSnapshot
from storage.url import redacted

REPORT_NAME = "report.html"


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px auto;max-width:1400px;color:#222;padding:0 16px}
h1{font-size:1.6em;margin-bottom:4px} h2{margin-top:36px;border-bottom:1px solid #ddd;padding-bottom:4px}
.meta{color:#666} .verdict{background:#f4f8ff;border-left:4px solid #1f3b73;padding:10px 16px}
.verdict p{margin:6px 0} pre{background:#f6f6f6;padding:10px;overflow-x:auto}
table{border-collapse:collapse;font-size:13px} th,td{border:1px solid #ddd;padding:4px 6px;vertical-align:top}
th{background:#1f3b73;color:#fff;cursor:pointer;position:sticky;top:0;white-space:nowrap}
th.sorted-asc::after{content:" \\25B2"} th.sorted-desc::after{content:" \\25BC"}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.mark{display:inline-block;padding:1px 6px;border-radius:8px;font-weight:600;font-size:12px}
.mark-feasible{background:#e3f5e1;color:#1b6b1b} .mark-infeasible{background:#fdebd3;color:#94520a}
.mark-failed{background:#f9d9d9;color:#9b1c1c} tr.chosen td{background:#fff8d6}
.scroll{overflow:auto;max-height:640px} .finding-error{color:#9b1c1c} .finding-warning{color:#94520a}
.finding-info{color:#555} details summary{cursor:pointer} .note{color:#666;font-style:italic}
td.diag{min-width:320px;max-width:480px} td.diag ul{margin:2px 0;padding-left:18px}
td.stages{min-width:260px} table.stages th{position:static;cursor:default}
.verdict p.sub{margin-left:1.5em} .call-win{color:#1b6b1b;font-weight:600} .call-loss{color:#9b1c1c;font-weight:600} .call-tie{color:#555}
"""
_SORT_JS = """
document.querySelectorAll('table.sortable').forEach(function(table){
  table.tHead.querySelectorAll('th').forEach(function(th, col){  // not a nested table's
    th.addEventListener('click', function(){
      var body = table.tBodies[0], rows = Array.from(body.rows);
      var asc = !th.classList.contains('sorted-asc');
      table.tHead.querySelectorAll('th').forEach(function(h){h.classList.remove('sorted-asc','sorted-desc')});
      th.classList.add(asc ? 'sorted-asc' : 'sorted-desc');
      function key(r){var c=r.cells[col]; var v=c.getAttribute('data-v'); return v===null?c.textContent:v;}
      rows.sort(function(a,b){
        var x=key(a), y=key(b), nx=parseFloat(x), ny=parseFloat(y);
        var cmp = (!isNaN(nx) && !isNaN(ny)) ? nx-ny : String(x).localeCompare(String(y));
        return asc ? cmp : -cmp;
      });
      rows.forEach(function(r){body.appendChild(r)});
    });
  });
});
"""


def _findings_html(title: str, findings: Sequence[Finding]) -> str:
    if not findings:
        return f"<p>{esc(title)}: no anti-pattern found.</p>"
    items = "".join(
        f'<li class="finding-{f.severity}">[{f.severity}] {esc(f.message)} '
        f'<span class="note">({esc(f.applies_to_v1)}; why: {esc(f.source)})</span></li>'
        for f in findings
    )
    return f"<p>{esc(title)}:</p><ul>{items}</ul>"


def searched_params(ls: LoadedStudy, views: list[TrialView]) -> list[str]:
    """Scenario parameters some trial sampled (the installed vLLM may have dropped others)."""
    sampled = {p for v in views for p in v.params}
    return [p for p in ls.scenario.search_space if p in sampled] + sorted(sampled - set(ls.scenario.search_space))


def _figure_sections(ls: LoadedStudy, snapshots: list[ParetoSnapshot]) -> list[tuple[str, str, str]]:
    """The figures' sections in page order: (section id, title, html)."""
    sc, rec, views = ls.scenario, ls.record, ls.views
    names, directions = sc.objective_names, sc.directions
    figs: list[tuple[str, str, str]] = []
    pairs = [(0, 1)] if len(names) == 2 else [(0, 1), (0, 2), (1, 2)] if len(names) == 3 else [(0, 0)]
    pareto_html = "".join(
        fig_html(figures.pareto_figure(views, names, directions, p), f"pareto-{a}-{b}") for p in pairs for a, b in [p]
    )
    figs.append(("pareto", "Pareto front", pareto_html))
    hv = figures.hypervolume_figure(snapshots, rec.hv_reference, names) if snapshots else None
    figs.append(
        (
            "hypervolume",
            "Hypervolume history",
            fig_html(hv, "hypervolume") or '<p class="note">No front snapshots stored yet.</p>',
        )
    )
    imp, imp_note = figures.importance_figure(ls.study, views, names, directions)
    figs.append(
        (
            "importances",
            "Parameter importances",
            fig_html(imp, "importances") + (f'<p class="note">{esc(imp_note)}</p>' if imp_note else ""),
        )
    )
    grid = figures.objective_param_figure(views, names, directions, searched_params(ls, views))
    figs.append(
        (
            "objective-vs-parameter",
            "Each objective against each parameter",
            fig_html(grid, "objective-vs-parameter") or '<p class="note">No measured trial yet.</p>',
        )
    )
    stages = figures.latency_rate_figure(views, latency_slos(ls))
    if stages is not None:
        figs.append(
            (
                "latency-vs-rate",
                "Latency against rate (load stages, capacity under the SLO)",
                fig_html(stages, "latency-vs-rate"),
            )
        )

    replayed = trace_figure(sc.workload)
    if replayed is not None:
        figs.append(("trace", "The replayed trace (its rate over time, the lengths sent)", fig_html(replayed, "trace")))
    return figs


def _verdict_html(lines: list[str]) -> str:
    return "".join(
        f'<p class="sub">{esc(x.strip())}</p>' if x.startswith(" ") else f"<p>{esc(x)}</p>" for x in lines
    )  # indented: one objective of the comparison above


def _chosen_html(ls: LoadedStudy, chosen: TrialView | None) -> str:
    """The chosen configuration as best.yaml holds it, its anti-patterns and its diagnosis."""
    if chosen is None:
        return ""
    body = yaml.safe_dump(export.serve_config(ls, chosen.number), sort_keys=False)
    return (
        f'<h2 id="chosen-config">Chosen configuration ({esc(chosen.label)})</h2>'
        f"<p>As <code>best.yaml</code> (beside this report) holds it, for "
        f"<code>vllm serve --config</code>:</p><pre>{esc(body)}</pre>"
        + _findings_html("Anti-patterns in the chosen configuration", chosen.diagnosis.findings)
        + f"<p><b>Its diagnosis</b>: {diagnosis_cell(chosen)}</p>"
    )


def _summary_json(ls: LoadedStudy, chosen: TrialView | None, n_by: dict[str, int]) -> str:
    """The page's machine-readable summary (a script element tests and tools read)."""
    return json.dumps(
        {
            "study": ls.record.study_name,
            "trials": len(ls.views),
            **n_by,
            "chosen": chosen.number if chosen else None,
            "verdict": ls.verdict.outcome.value if ls.verdict is not None else None,
        }
    )


def build_html(ls: LoadedStudy, snapshots: list[ParetoSnapshot], storage_url: str) -> str:
    sc, rec = ls.scenario, ls.record
    views = ls.views
    chosen, lines = verdict(ls, views)
    figs = _figure_sections(ls, snapshots)
    base_findings = "".join(
        _findings_html(f"Baseline {v.baseline} (trial {v.number})", v.diagnosis.findings) for v in views if v.baseline
    )
    n_by = {c: sum(v.category == c for v in views) for c in (FEASIBLE, INFEASIBLE, FAILED)}
    created = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    toc = "".join(f'<a href="#{sid}">{esc(t)}</a> · ' for sid, t, _ in figs)
    sections = "".join(f'<h2 id="{sid}">{esc(t)}</h2>{h}' for sid, t, h in figs)
    slo_metrics = [s.metric for s in sc.slos]
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>vllm-autotune report: {esc(rec.study_name)}</title>
<style>{_CSS}</style>
<script type="text/javascript">{get_plotlyjs()}</script>
<script type="application/json" id="report-summary">{_summary_json(ls, chosen, n_by)}</script>
</head><body>
<h1>vllm-autotune report: study {esc(rec.study_name)}</h1>
<p class="meta">Scenario <b>{esc(sc.name)}</b> ({esc(sc.title)}); {esc(rec.vllm_version)};
{esc(rec.hardware.get("description", ""))}; model {esc(rec.model_path)}; storage {esc(redacted(storage_url))};
written {created}.</p>
<div class="verdict" id="verdict">{_verdict_html(lines)}</div>
{_chosen_html(ls, chosen)}
{confirmation_section(ls)}
<h2 id="bottlenecks">What limited the trials</h2>
{fig_html(figures.bottleneck_figure(views), "bottlenecks")}
<details><summary>Anti-patterns in the baselines</summary>{base_findings}</details>
<p>Sections: <a href="#confirmation">Confirmation</a> · {toc}<a href="#trials">Trials</a> · <a href="#all-metrics">All metrics</a></p>
{sections}
<h2 id="trials">Trials</h2>
<p>Click a column to sort. Feasibility: {mark(FEASIBLE)} {n_by[FEASIBLE]} · {mark(INFEASIBLE)}
{n_by[INFEASIBLE]} · {mark(FAILED)} {n_by[FAILED]}. Latencies in ms, throughputs per second.</p>
{trials_table(views, sc.objective_names, slo_metrics)}
<h2 id="all-metrics">All metrics</h2>
<details><summary>every measured metric of every trial (client side, per class, server /metrics)</summary>
{metrics_table(views)}</details>
<script>{_SORT_JS}</script>
</body></html>
"""


def write_report(storage_url: str, study_name: str, out_path: Path | str | None = None) -> Path:
    """Write the study's report; default path: runs/<study>/report.html beside best.yaml."""
    with Session(database.open_db(storage_url), expire_on_commit=False) as session:
        ls = load_study(session, storage_url, study_name)
        snapshots = queries.front_history(session, ls.record)
        page = build_html(ls, snapshots, storage_url)
    out = Path(out_path) if out_path else DEFAULT_RUNS_DIR / study_name / REPORT_NAME
    return write_atomic(out, page)
