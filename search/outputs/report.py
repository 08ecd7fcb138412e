"""One self-contained HTML file per study: open it anywhere, offline (plotly.js is inlined).

Top: the recommendation and its gain over each baseline, in plain words. Then the confirmation
phase (the verdict on re-measured candidates with intervals and run counts, every run, the
run-to-run noise, and the calibration reference with its spread), what limited the trials, the Pareto front (feasible / infeasible / failed told apart, baselines marked), the
hypervolume history from the stored front snapshots, parameter importances, each objective
against each parameter, latency against rate over each trial's load stages (when trials ran a
capacity search), and a sortable table of every trial with its metrics, failure class
and diagnosis.
"""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import yaml
from plotly.offline import get_plotlyjs
from sqlalchemy.orm import Session

from loadgen import MetricName
from search.disk import write_atomic
from search.outputs import export, figures, verdict_text
from search.outputs.confirmation_rows import confirmation_rows
from search.outputs.format import fmt_percent, fmt_value
from search.outputs.read_model import LoadedStudy, latency_slos, load_study
from search.outputs.recommendation import verdict
from search.outputs.trace_figure import trace_figure
from search.outputs.trial_views import (
    FAILED,
    FEASIBLE,
    INFEASIBLE,
    STAGE_COLUMNS,
    TrialView,
    stage_rows,
    stages_summary,
)
from storage import queries
from storage.url import redacted

REPORT_NAME = "report.html"
# Shown as columns of the trial table when measured; every metric is in the full table below it.
KEY_METRICS = (
    "request_throughput",
    "output_throughput",
    "goodput",
    "ttft_p95_ms",
    "tpot_p95_ms",
    "e2el_p95_ms",
    "error_rate",
    "server_preemptions",
    "server_queue_time_mean_ms",
    "server_waiting_peak",
    "server_running_peak",
    "server_kv_cache_usage_peak",
    "server_prefix_cache_hit_rate",
    "schedule_lag_p99_ms",
)

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


def _e(x: Any) -> str:
    return html.escape(str(x))


def _num(v: Any) -> tuple[str, str]:
    """(shown text, sort key) of a metric value; the key sorts numbers by value, not by text."""
    shown = _e(fmt_value(v, digits=4, missing=""))
    if isinstance(v, bool):
        return shown, str(int(v))
    if isinstance(v, (int, float)) and shown:
        return shown, repr(float(v))
    return shown, shown


def _fig_html(fig: go.Figure | None, div_id: str) -> str:
    """The figure's div is "fig-<div_id>" (section headings carry the bare ids)."""
    if fig is None:
        return ""
    height = fig.layout.height or 450  # else the div takes the viewport's height: blank space
    return fig.to_html(
        full_html=False,
        include_plotlyjs=False,
        div_id="fig-" + div_id,
        default_height=f"{height}px",
        config={"displaylogo": False},
    )


def _mark(category: str) -> str:
    return f'<span class="mark mark-{category}" data-category="{category}">{category}</span>'


def _findings_html(title: str, findings) -> str:
    if not findings:
        return f"<p>{_e(title)}: no anti-pattern found.</p>"
    items = "".join(
        f'<li class="finding-{f.severity}">[{f.severity}] {_e(f.message)} '
        f'<span class="note">({_e(f.applies_to_v1)}; why: {_e(f.source)})</span></li>'
        for f in findings
    )
    return f"<p>{_e(title)}:</p><ul>{items}</ul>"


def _diagnosis_cell(v: TrialView) -> str:
    d = v.diagnosis
    parts = [f"<b>{_e(d.bottleneck)}</b>: {_e(d.headline)}"]
    details = ""
    if d.evidence:
        details += "<i>evidence</i><ul>" + "".join(f"<li>{_e(x)}</li>" for x in d.evidence) + "</ul>"
    if d.next_steps:
        details += "<i>try next</i><ul>" + "".join(f"<li>{_e(x)}</li>" for x in d.next_steps) + "</ul>"
    if d.also:
        details += "<i>also</i><ul>" + "".join(f"<li>{_e(x)}</li>" for x in d.also) + "</ul>"
    if details:
        parts.append(f"<details><summary>details</summary>{details}</details>")
    return "".join(parts)


def stages_cell(v: TrialView) -> str:
    """The trial's load stages: one line, the capacity, and the stage table folded under it."""
    if not v.stages:
        return ""
    capacity = f"<br>capacity {_e(v.capacity.summary)}" if v.capacity else ""
    head = "".join(f"<th>{_e(h)}</th>" for h in STAGE_COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in stage_rows(v.stages))
    return (
        f"{_e(stages_summary(v.stages))}{capacity}<details><summary>stages</summary>"
        f'<table class="stages"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></details>'
    )


def trials_table(views: list[TrialView], names: list[str], slo_metrics: list[str]) -> str:
    metric_cols = list(dict.fromkeys([*names, *slo_metrics, *KEY_METRICS]))
    staged = any(v.stages for v in views)
    # Where each trial ran, once several workers ran the study side by side.
    placed = len({(v.worker or {}).get("slot") for v in views}) > 1 or any(
        (v.worker or {}).get("neighbours") for v in views
    )
    head = [
        "trial",
        "kind",
        "feasibility",
        "front",
        "violated SLOs",
        "failure class",
        "bottleneck",
        "diagnosis",
        *(["load stages"] if staged else []),
        *(["worker slot"] if placed else []),
        *metric_cols,
        "parameters",
    ]
    rows = []
    for v in views:
        cells = [
            f'<td class="num" data-v="{v.number}">{v.number}</td>',
            f"<td>{_e(v.kind)}" + (f'<br><span class="note">{_e(v.origin)}</span>' if v.origin else "") + "</td>",
            f'<td data-v="{v.category}">{_mark(v.category)}</td>',
            f"<td>{'chosen' if v.chosen else 'yes' if v.on_front else ''}</td>",
        ]
        cells.append("<td>" + _e(", ".join(f"{k} (+{x:.0%})" for k, x in v.violated.items())) + "</td>")
        cells.append(
            "<td>"
            + (_e(v.failure.split(" ", 1)[0]) + f'<br><span class="note">{_e(v.failure)}</span>' if v.failure else "")
            + "</td>"
        )
        cells.append(f'<td data-v="{_e(v.diagnosis.bottleneck)}">{_e(v.diagnosis.bottleneck)}</td>')
        cells.append(f'<td class="diag">{_diagnosis_cell(v)}</td>')
        if staged:
            cells.append(f'<td class="stages" data-v="{len(v.stages)}">{stages_cell(v)}</td>')
        if placed:
            cells.append(f"<td>{_e(v.placement)}</td>")
        for m in metric_cols:
            shown, key = _num(v.metrics.get(m)) if v.category != FAILED else ("", "")
            cells.append(f'<td class="num" data-v="{key}">{shown}</td>')
        cells.append(
            "<td>"
            + _e(", ".join(f"{k}={fmt_value(x)}" for k, x in v.params.items()))
            + "".join(f'<br><span class="note">{_e(a)}</span>' for a in v.adjustments)
            + "</td>"
        )
        rows.append(
            f'<tr data-trial="{v.number}" data-category="{v.category}"'
            f"{' class=chosen' if v.chosen else ''}>" + "".join(cells) + "</tr>"
        )
    return (
        '<div class="scroll"><table class="sortable" id="trials-table"><thead><tr>'
        + "".join(f"<th>{_e(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></div>"
    )


def metrics_table(views: list[TrialView]) -> str:
    keys = sorted({k for v in views for k in v.metrics}, key=lambda k: (MetricName.parse(k).cls is not None, k))
    head = "".join(f"<th>{_e(k)}</th>" for k in ["trial", *keys])
    rows = []
    for v in views:
        cells = "".join(
            f'<td class="num" data-v="{_num(v.metrics.get(k))[1]}">{_num(v.metrics.get(k))[0]}</td>' for k in keys
        )
        rows.append(f'<tr><td class="num" data-v="{v.number}">{v.number}</td>{cells}</tr>')
    return (
        '<div class="scroll"><table class="sortable" id="metrics-table"><thead><tr>'
        + head
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></div>"
    )


def _lines_html(text: verdict_text.VerdictText) -> str:
    """The verdict in full: headline, ties, each comparison block as a list, the rest as paragraphs."""
    out = [f"<p><b>{_e(text.headline)}</b></p>"] + ([f"<p><b>{_e(text.gain)}</b></p>"] if text.gain else [])
    out += [f"<p>{_e(text.ties)}</p>"] if text.ties else []
    for block in text.comparisons:
        out.append(f"<p>{_e(block.title)}:</p><ul>" + "".join(f"<li>{_e(x)}</li>" for x in block.lines) + "</ul>")
    if text.infeasible:
        out.append("<p>Missed the SLOs:</p><ul>" + "".join(f"<li>{_e(x)}</li>" for x in text.infeasible) + "</ul>")
    if text.noise:
        out.append(f"<p>{_e(text.noise)}</p>")
    out += [f'<p class="finding-warning">warning: {_e(w)}</p>' for w in text.warnings]
    out += [f'<p class="note">{_e(n)}</p>' for n in text.notes]
    return "".join(out)


def confirmation_table(ls: LoadedStudy) -> str:
    t = confirmation_rows(ls)
    head = [
        "candidate",
        "runs ok",
        *[f"{n} median [95%]" for n in t.objectives],
        "SLOs (confirmed medians)",
        *[f"vs {b}" for b in t.baselines],
    ]
    rows = []
    for row in t.rows:
        cells = [
            f"<td>{_e(row.label)}{' (deployed)' if row.deployed else ''}</td>",
            f'<td class="num">{row.runs_ok}</td>',
        ]
        cells += [f'<td class="num" data-v="{median!r}">{_e(text)}</td>' for text, median in row.medians]
        cells.append(f"<td>{_mark(FEASIBLE if row.feasible else INFEASIBLE)} {_e(row.slo)}</td>")
        for calls in row.calls:
            cells.append(
                "<td>"
                + (
                    ""
                    if calls is None
                    else "<br>".join(f'<span class="call-{calls[m]}">{_e(m)} {calls[m]}</span>' for m in t.objectives)
                )
                + "</td>"
            )
        rows.append(
            f'<tr data-trial="{row.trial_number}"{" class=chosen" if row.deployed else ""}>' + "".join(cells) + "</tr>"
        )
    return (
        '<table class="sortable" id="confirmation-table"><thead><tr>'
        + "".join(f"<th>{_e(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def noise_table(ls: LoadedStudy) -> str:
    """The run-to-run spread of each objective and SLO metric in the confirmation runs."""
    sc, v = ls.scenario, ls.verdict
    runs = max((c.rounds for c in v.candidates), default=0)
    rows = "".join(
        f"<tr><td>{_e(m)}</td><td>{'objective' if m in sc.objective_names else 'SLO metric'}</td>"
        f'<td class="num">{_e(fmt_percent(cv))}</td></tr>'
        for m, cv in v.noise.items()
    )
    return (
        f'<table id="noise-table"><thead><tr><th>metric</th><th>role</th><th>CV over {runs} runs '
        f"(pooled over the candidates)</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def confirmation_section(ls: LoadedStudy) -> str:
    """The verdict on the re-measured candidates, their runs, the noise and the calibration."""
    sc = ls.scenario
    calibration = verdict_text.calibration_lines(sc, ls.calibration())
    cal_html = (
        (
            '<h3 id="calibration">Calibration reference (how far it could move)</h3>'
            + "".join(f"<p>{_e(x)}</p>" for x in calibration)
        )
        if calibration
        else ""
    )
    text = ls.verdict_text()
    if text is None:
        return f'<h2 id="confirmation">Confirmation</h2><p class="note">{_e(ls.unconfirmed_note())}</p>' + cal_html
    fig = figures.confirmation_figure(ls.verdict, sc.objective_names, sc.directions, ls.deployment().trial_number)
    note = ls.unconfirmed_note()
    return (
        f'<h2 id="confirmation">Confirmation</h2><div class="verdict" id="confirmation-verdict">'
        f"{_lines_html(text)}{f'<p>{_e(note)}</p>' if note else ''}</div>"
        f"<p>Each candidate re-run {ls.record.confirmation['runs']} times on fresh servers, in interleaved "
        "rounds; medians with bootstrap 95% intervals. A win or a loss: the 95% interval of the relative "
        "difference excludes 0; otherwise the noise can explain it (tie).</p>"
        + confirmation_table(ls)
        + _fig_html(fig, "confirmation")
        + '<h3 id="noise">Run-to-run noise</h3>'
        + noise_table(ls)
        + cal_html
    )


def searched_params(ls: LoadedStudy, views: list[TrialView]) -> list[str]:
    """Scenario parameters some trial sampled (the installed vLLM may have dropped others)."""
    sampled = {p for v in views for p in v.params}
    return [p for p in ls.scenario.search_space if p in sampled] + sorted(sampled - set(ls.scenario.search_space))


def build_html(ls: LoadedStudy, snapshots, storage_url: str) -> str:
    sc, rec = ls.scenario, ls.record
    names, directions = sc.objective_names, sc.directions
    views = ls.views
    chosen, lines = verdict(ls, views)
    baselines = [v for v in views if v.baseline]

    figs: list[tuple[str, str, str]] = []  # (section id, title, html)
    pairs = [(0, 1)] if len(names) == 2 else [(0, 1), (0, 2), (1, 2)] if len(names) == 3 else [(0, 0)]
    pareto_html = "".join(
        _fig_html(figures.pareto_figure(views, names, directions, p), f"pareto-{a}-{b}") for p in pairs for a, b in [p]
    )
    figs.append(("pareto", "Pareto front", pareto_html))
    hv = figures.hypervolume_figure(snapshots, rec.hv_reference, names) if snapshots else None
    figs.append(
        (
            "hypervolume",
            "Hypervolume history",
            _fig_html(hv, "hypervolume") or '<p class="note">No front snapshots stored yet.</p>',
        )
    )
    imp, imp_note = figures.importance_figure(ls.study, views, names, directions)
    figs.append(
        (
            "importances",
            "Parameter importances",
            _fig_html(imp, "importances") + (f'<p class="note">{_e(imp_note)}</p>' if imp_note else ""),
        )
    )
    grid = figures.objective_param_figure(views, names, directions, searched_params(ls, views))
    figs.append(
        (
            "objective-vs-parameter",
            "Each objective against each parameter",
            _fig_html(grid, "objective-vs-parameter") or '<p class="note">No measured trial yet.</p>',
        )
    )
    stages = figures.latency_rate_figure(views, latency_slos(ls))
    if stages is not None:
        figs.append(
            (
                "latency-vs-rate",
                "Latency against rate (load stages, capacity under the SLO)",
                _fig_html(stages, "latency-vs-rate"),
            )
        )

    replayed = trace_figure(sc.workload)
    if replayed is not None:
        figs.append(
            ("trace", "The replayed trace (its rate over time, the lengths sent)", _fig_html(replayed, "trace"))
        )

    verdict_html = "".join(
        f'<p class="sub">{_e(x.strip())}</p>' if x.startswith(" ") else f"<p>{_e(x)}</p>" for x in lines
    )  # indented: one objective of the comparison above
    chosen_html = ""
    if chosen is not None:
        body = yaml.safe_dump(export.serve_config(ls, chosen.number), sort_keys=False)
        chosen_html = (
            f'<h2 id="chosen-config">Chosen configuration ({_e(chosen.label)})</h2>'
            f"<p>As <code>best.yaml</code> (beside this report) holds it, for "
            f"<code>vllm serve --config</code>:</p><pre>{_e(body)}</pre>"
            + _findings_html("Anti-patterns in the chosen configuration", chosen.diagnosis.findings)
            + f"<p><b>Its diagnosis</b>: {_diagnosis_cell(chosen)}</p>"
        )
    base_findings = "".join(
        _findings_html(f"Baseline {v.baseline} (trial {v.number})", v.diagnosis.findings) for v in baselines
    )
    n_by = {c: sum(v.category == c for v in views) for c in (FEASIBLE, INFEASIBLE, FAILED)}
    created = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    toc = "".join(f'<a href="#{sid}">{_e(t)}</a> · ' for sid, t, _ in figs)
    sections = "".join(f'<h2 id="{sid}">{_e(t)}</h2>{h}' for sid, t, h in figs)
    slo_metrics = [s.metric for s in sc.slos]
    summary = json.dumps(
        {
            "study": rec.study_name,
            "trials": len(views),
            **n_by,
            "chosen": chosen.number if chosen else None,
            "verdict": ls.verdict.outcome.value if ls.verdict is not None else None,
        }
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>vllm-autotune report: {_e(rec.study_name)}</title>
<style>{_CSS}</style>
<script type="text/javascript">{get_plotlyjs()}</script>
<script type="application/json" id="report-summary">{summary}</script>
</head><body>
<h1>vllm-autotune report: study {_e(rec.study_name)}</h1>
<p class="meta">Scenario <b>{_e(sc.name)}</b> ({_e(sc.title)}); {_e(rec.vllm_version)};
{_e(rec.hardware.get("description", ""))}; model {_e(rec.model_path)}; storage {_e(redacted(storage_url))};
written {created}.</p>
<div class="verdict" id="verdict">{verdict_html}</div>
{chosen_html}
{confirmation_section(ls)}
<h2 id="bottlenecks">What limited the trials</h2>
{_fig_html(figures.bottleneck_figure(views), "bottlenecks")}
<details><summary>Anti-patterns in the baselines</summary>{base_findings}</details>
<p>Sections: <a href="#confirmation">Confirmation</a> · {toc}<a href="#trials">Trials</a> · <a href="#all-metrics">All metrics</a></p>
{sections}
<h2 id="trials">Trials</h2>
<p>Click a column to sort. Feasibility: {_mark(FEASIBLE)} {n_by[FEASIBLE]} · {_mark(INFEASIBLE)}
{n_by[INFEASIBLE]} · {_mark(FAILED)} {n_by[FAILED]}. Latencies in ms, throughputs per second.</p>
{trials_table(views, names, slo_metrics)}
<h2 id="all-metrics">All metrics</h2>
<details><summary>every measured metric of every trial (client side, per class, server /metrics)</summary>
{metrics_table(views)}</details>
<script>{_SORT_JS}</script>
</body></html>
"""


def write_report(storage_url: str, study_name: str, out_path: Path | str | None = None) -> Path:
    """Write the study's report; default path: runs/<study>/report.html beside best.yaml."""
    with Session(queries.open_db(storage_url), expire_on_commit=False) as session:
        ls = load_study(session, storage_url, study_name)
        snapshots = queries.front_history(session, ls.record)
        page = build_html(ls, snapshots, storage_url)
    out = Path(out_path) if out_path else Path("runs") / study_name / REPORT_NAME
    return write_atomic(out, page)
