"""The report's trial tables: every trial with its feasibility, failure, diagnosis, load stages,
key metrics and parameters (sortable), and every metric of every trial."""

from __future__ import annotations

from app.outputs.format import fmt_value
from app.outputs.report.markup import esc, mark, num_cell
from app.outputs.trial_views import FAILED, STAGE_COLUMNS, TrialView, stage_rows, stages_summary
from loadgen import MetricName

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


def diagnosis_cell(v: TrialView) -> str:
    d = v.diagnosis
    parts = [f"<b>{esc(d.bottleneck)}</b>: {esc(d.headline)}"]
    details = ""
    if d.evidence:
        details += "<i>evidence</i><ul>" + "".join(f"<li>{esc(x)}</li>" for x in d.evidence) + "</ul>"
    if d.next_steps:
        details += "<i>try next</i><ul>" + "".join(f"<li>{esc(x)}</li>" for x in d.next_steps) + "</ul>"
    if d.also:
        details += "<i>also</i><ul>" + "".join(f"<li>{esc(x)}</li>" for x in d.also) + "</ul>"
    if details:
        parts.append(f"<details><summary>details</summary>{details}</details>")
    return "".join(parts)


def stages_cell(v: TrialView) -> str:
    """The trial's load stages: one line, the capacity, and the stage table folded under it."""
    if not v.stages:
        return ""
    capacity = f"<br>capacity {esc(v.capacity.summary)}" if v.capacity else ""
    head = "".join(f"<th>{esc(h)}</th>" for h in STAGE_COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in stage_rows(v.stages))
    return (
        f"{esc(stages_summary(v.stages))}{capacity}<details><summary>stages</summary>"
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
            f"<td>{esc(v.kind)}" + (f'<br><span class="note">{esc(v.origin)}</span>' if v.origin else "") + "</td>",
            f'<td data-v="{v.category}">{mark(v.category)}</td>',
            f"<td>{'chosen' if v.chosen else 'yes' if v.on_front else ''}</td>",
        ]
        cells.append("<td>" + esc(", ".join(f"{k} (+{x:.0%})" for k, x in v.violated.items())) + "</td>")
        cells.append(
            "<td>"
            + (esc(v.failure.split(" ", 1)[0]) + f'<br><span class="note">{esc(v.failure)}</span>' if v.failure else "")
            + "</td>"
        )
        cells.append(f'<td data-v="{esc(v.diagnosis.bottleneck)}">{esc(v.diagnosis.bottleneck)}</td>')
        cells.append(f'<td class="diag">{diagnosis_cell(v)}</td>')
        if staged:
            cells.append(f'<td class="stages" data-v="{len(v.stages)}">{stages_cell(v)}</td>')
        if placed:
            cells.append(f"<td>{esc(v.placement)}</td>")
        for m in metric_cols:
            shown, key = num_cell(v.metrics.get(m)) if v.category != FAILED else ("", "")
            cells.append(f'<td class="num" data-v="{key}">{shown}</td>')
        cells.append(
            "<td>"
            + esc(", ".join(f"{k}={fmt_value(x)}" for k, x in v.params.items()))
            + "".join(f'<br><span class="note">{esc(a)}</span>' for a in v.adjustments)
            + "</td>"
        )
        rows.append(
            f'<tr data-trial="{v.number}" data-category="{v.category}"'
            f"{' class=chosen' if v.chosen else ''}>" + "".join(cells) + "</tr>"
        )
    return (
        '<div class="scroll"><table class="sortable" id="trials-table"><thead><tr>'
        + "".join(f"<th>{esc(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></div>"
    )


def metrics_table(views: list[TrialView]) -> str:
    keys = sorted({k for v in views for k in v.metrics}, key=lambda k: (MetricName.parse(k).cls is not None, k))
    head = "".join(f"<th>{esc(k)}</th>" for k in ["trial", *keys])
    rows = []
    for v in views:
        cells = "".join(
            f'<td class="num" data-v="{num_cell(v.metrics.get(k))[1]}">{num_cell(v.metrics.get(k))[0]}</td>'
            for k in keys
        )
        rows.append(f'<tr><td class="num" data-v="{v.number}">{v.number}</td>{cells}</tr>')
    return (
        '<div class="scroll"><table class="sortable" id="metrics-table"><thead><tr>'
        + head
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></div>"
    )
