"""The report's confirmation section: the verdict in full, the re-measured candidates against
the baselines, every run, the run-to-run noise and the calibration reference."""

from __future__ import annotations

from app.outputs import calibration_text, figures, verdict_text
from app.outputs.confirmation_rows import ConfirmationRows, confirmation_rows
from app.outputs.format import fmt_percent
from app.outputs.read_model import LoadedStudy
from app.outputs.report.markup import esc, fig_html, mark
from app.outputs.trial_views import FEASIBLE, INFEASIBLE
from search.scenario import Scenario
from search.study.verdict import Verdict


def _block_html(block: verdict_text.Block) -> str:
    return f"<p>{esc(block.title)}:</p><ul>" + "".join(f"<li>{esc(x)}</li>" for x in block.lines) + "</ul>"


def _lines_html(text: verdict_text.VerdictText) -> str:
    """The verdict in full: headline, ties, each comparison block as a list, the rest as paragraphs."""
    out = [f"<p><b>{esc(text.headline)}</b></p>"] + ([f"<p><b>{esc(text.gain)}</b></p>"] if text.gain else [])
    out += [f"<p><b>{esc(text.cost)}</b></p>"] if text.cost else []
    out += [f"<p>{esc(text.ties)}</p>"] if text.ties else []
    out += [_block_html(block) for block in text.comparisons]
    if text.infeasible:
        out.append("<p>Missed the SLOs:</p><ul>" + "".join(f"<li>{esc(x)}</li>" for x in text.infeasible) + "</ul>")
    out += [_block_html(text.costs)] if text.costs else []
    if text.noise:
        out.append(f"<p>{esc(text.noise)}</p>")
    out += [f'<p class="finding-warning">warning: {esc(w)}</p>' for w in text.warnings]
    out += [f'<p class="note">{esc(n)}</p>' for n in text.notes]
    return "".join(out)


def confirmation_table(t: ConfirmationRows) -> str:
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
            f"<td>{esc(row.label)}{' (deployed)' if row.deployed else ''}</td>",
            f'<td class="num">{row.runs_ok}</td>',
        ]
        cells += [f'<td class="num" data-v="{median!r}">{esc(text)}</td>' for text, median in row.medians]
        cells.append(f"<td>{mark(FEASIBLE if row.feasible else INFEASIBLE)} {esc(row.slo)}</td>")
        for calls in row.calls:
            cells.append(
                "<td>"
                + (
                    ""
                    if calls is None
                    else "<br>".join(f'<span class="call-{calls[m]}">{esc(m)} {calls[m]}</span>' for m in t.objectives)
                )
                + "</td>"
            )
        rows.append(
            f'<tr data-trial="{row.trial_number}"{" class=chosen" if row.deployed else ""}>' + "".join(cells) + "</tr>"
        )
    return (
        '<table class="sortable" id="confirmation-table"><thead><tr>'
        + "".join(f"<th>{esc(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def noise_table(sc: Scenario, v: Verdict) -> str:
    """The run-to-run spread of each objective and SLO metric in the confirmation runs."""
    runs = max((c.rounds for c in v.candidates), default=0)
    rows = "".join(
        f"<tr><td>{esc(m)}</td><td>{'objective' if m in sc.objective_names else 'SLO metric'}</td>"
        f'<td class="num">{esc(fmt_percent(cv))}</td></tr>'
        for m, cv in v.noise.items()
    )
    return (
        f'<table id="noise-table"><thead><tr><th>metric</th><th>role</th><th>CV over {runs} runs '
        f"(pooled over the candidates)</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def confirmation_section(ls: LoadedStudy) -> str:
    """The verdict on the re-measured candidates, their runs, the noise and the calibration."""
    sc = ls.scenario
    calibration = calibration_text.calibration_lines(sc, ls.calibration())
    cal_html = (
        (
            '<h3 id="calibration">Calibration reference (how far it could move)</h3>'
            + "".join(f"<p>{esc(x)}</p>" for x in calibration)
        )
        if calibration
        else ""
    )
    v, rows = ls.verdict, confirmation_rows(ls)
    if v is None or rows is None:
        return f'<h2 id="confirmation">Confirmation</h2><p class="note">{esc(ls.unconfirmed_note())}</p>' + cal_html
    fig = figures.confirmation_figure(v, sc.objective_names, sc.directions, ls.deployment().trial_number)
    note = ls.unconfirmed_note()
    return (
        f'<h2 id="confirmation">Confirmation</h2><div class="verdict" id="confirmation-verdict">'
        f"{_lines_html(ls.describe(v))}{f'<p>{esc(note)}</p>' if note else ''}</div>"
        f"<p>Each candidate re-run {rows.runs} times on fresh servers, in interleaved "
        "rounds; medians with bootstrap 95% intervals. A win or a loss: the 95% interval of the relative "
        "difference excludes 0; otherwise the noise can explain it (tie).</p>"
        + confirmation_table(rows)
        + fig_html(fig, "confirmation")
        + '<h3 id="noise">Run-to-run noise</h3>'
        + noise_table(sc, v)
        + cal_html
    )
