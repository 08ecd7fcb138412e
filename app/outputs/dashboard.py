"""Make optuna-dashboard 0.21 tell the truth about a study, then serve it on 127.0.0.1.

optuna-dashboard 0.21 does not read Optuna 5's `Trial.set_constraint` (the study mirrors the
constraints into the old list it does read, so its trial list and Pareto plot colour infeasible
trials), and its "best trials" are a Pareto set that ignores constraints altogether. So
`publish` adds what it cannot compute, in the places it does show:

* custom plotly figures (`save_plotly_graph_object`), on the study's top page: the
  feasible Pareto front as the report draws it, Optuna's own `plot_pareto_front` (which
  honours the constraints), the hypervolume history from our front snapshots, parameter
  importances without the failed trials' penalty values, each objective against each
  parameter, latency against rate over each trial's load stages, the confirmation runs, the
  bottleneck count, and a table of every trial with its failure and diagnosis;
* a study note: the recommendation (the confirmed verdict, with intervals and run counts, the
  noise and the calibration's spread), the true feasible Pareto set, and the caveat above;
* a note per trial: feasibility, violated SLOs, failure, the capacity found and the load stages,
  every measured metric, the diagnosis.

While a study runs, `DashboardPublisher` (a subscriber of the loop's events) keeps the notes
current trial by trial, once each is recorded. The user attributes the dashboard's trial table
shows (how the trial went, every metric, its diagnosis) and the study's setup can only be written
before a trial is told (Optuna refuses afterwards): the study writes them, with the trial, when a
subscriber shows them (`shows_trial_attributes`; `search.study.attributes`); this module reads.
"""

from __future__ import annotations

import math
import socket
import sys
from dataclasses import dataclass
from typing import Any

import optuna
from sqlalchemy.orm import Session

from app.outputs import calibration_text, figures
from app.outputs.format import fmt_value
from app.outputs.read_model import LoadedStudy, latency_slos, load_study
from app.outputs.recommendation import verdict
from app.outputs.report import searched_params
from app.outputs.trial_views import (
    FAILED,
    FEASIBLE,
    INFEASIBLE,
    STAGE_COLUMNS,
    TrialView,
    stage_rows,
    stages_summary,
    view_of,
)
from loadgen import MetricName
from objectives.diagnosis import summarize
from search.proposals import origin
from search.scenario import Scenario
from search.study.events import StudyObserver, StudyStarted, TrialRecorded, TrialScored
from search.trial_results import diagnosis_of
from storage import database, queries
from storage.tables import ParetoSnapshot, TrialRecord
from storage.url import redacted

DASHBOARD_CARD_HEIGHT = 440  # optuna-dashboard 0.21 gives a custom figure a 450 px high box


@dataclass
class Published:
    study_name: str
    figures: list[str]
    trial_notes: int


def trial_note(v: TrialView, scenario: Scenario) -> str:
    """Markdown for the trial's note: what a serving engineer asks of one trial."""
    mark = {
        FEASIBLE: "FEASIBLE (meets every SLO)",
        INFEASIBLE: "INFEASIBLE (violates an SLO)",
        FAILED: "FAILED (never served)",
    }[v.category]
    lines = [f"## {v.label}: {mark}", ""]
    if v.chosen:
        lines += ["**Chosen configuration** of the study.", ""]
    elif v.on_front:
        lines += ["On the feasible Pareto front.", ""]
    if v.values:
        names = scenario.objective_names
        lines += ["| objective | value |", "|---|---|"]
        lines += [f"| {n} | {text} |" for n, text in zip(names, v.objective_texts(names, digits=3))]
        lines.append("")
        if unmeasured := [n for n, x in zip(names, v.measured_values(names) or []) if math.isnan(x)]:
            lines += [
                f"Optuna's value for {', '.join(unmeasured)} is the penalty told to the sampler for a "
                "metric with no value, not a measurement.",
                "",
            ]
    if v.violated:
        lines.append(
            "**Violated SLOs** (by how much of the bound): "
            + ", ".join(f"`{k}` +{x:.0%}" for k, x in v.violated.items())
        )
        lines.append("")
    if v.failure:
        lines += [f"**Failure**: `{v.failure[:400]}`", ""]
    if v.duplicate_of is not None:
        lines += [f"Same flags as trial {v.duplicate_of}: its measurement is reused.", ""]
    if v.origin:
        lines += [f"**Where its configuration came from**: {v.origin}", ""]
    lines += stages_markdown(v)
    lines += ["### Diagnosis", "", v.diagnosis.markdown(), ""]
    if v.adjustments:
        lines += ["**Adjusted for the installed vLLM**: " + "; ".join(v.adjustments), ""]
    if v.params:
        lines.append("**Parameters**: " + ", ".join(f"`{k}={fmt_value(x)}`" for k, x in v.params.items()))
        lines.append("")
    if v.metrics:
        base = {k: x for k, x in v.metrics.items() if MetricName.parse(k).cls is None}
        classes = sorted({c for k in v.metrics if (c := MetricName.parse(k).cls) is not None})
        lines += ["### Every measured metric", "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {fmt_value(x)} |" for k, x in base.items()]
        for cls in classes:
            lines += [f"| {k} | {fmt_value(x)} |" for k, x in v.metrics.items() if k.endswith("@" + cls)]
    return "\n".join(lines) + "\n"


def stages_markdown(v: TrialView) -> list[str]:
    """The capacity found and the table of the trial's load stages (nothing without stages)."""
    lines = [f"**Capacity under the SLO**: {v.capacity.summary}", ""] if v.capacity else []
    if not v.stages:
        return lines
    lines += [
        f"### Load stages ({stages_summary(v.stages)})",
        "",
        "| " + " | ".join(STAGE_COLUMNS) + " |",
        "|" + "---|" * len(STAGE_COLUMNS),
    ]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in stage_rows(v.stages)]
    return [*lines, ""]


def study_note(ls: LoadedStudy, views: list[TrialView], report_path: str | None) -> str:
    _chosen, lines = verdict(ls, views)
    front = [v for v in views if v.on_front]
    counts = summarize(v.diagnosis.as_dict() for v in views)
    out = [f"# {ls.record.study_name}: {ls.scenario.title}", ""]
    out += [f"  - {x.strip()}" if x.startswith(" ") else f"- {x}" for x in lines]  # indented: one objective
    out += ["", *confirmation_markdown(ls)]
    out += ["", "## Feasible Pareto front (SLOs honoured)", ""]
    out.append(
        ", ".join(f"trial {v.number}" + (f" ({v.baseline})" if v.baseline else "") for v in front)
        or "none: no trial met every SLO"
    )
    out += [
        "",
        "**Caveat**: optuna-dashboard 0.21 computes its own *Best Trials* and highlights its "
        "Pareto front without constraints, so it may list infeasible trials there. Trust the "
        "figure *Pareto front (feasible, SLOs honoured)* on the study page, the `feasible` "
        "user attribute, and this list.",
        "",
    ]
    out += ["## What limited the trials", ""]
    out += [f"- {k}: {n}" for k, n in counts.items()]
    if report_path:
        out += ["", f"Full report (offline HTML): `{report_path}`"]
    return "\n".join(out) + "\n"


def confirmation_markdown(ls: LoadedStudy) -> list[str]:
    """The confirmation phase in the study note: every verdict line (comparisons with their
    intervals and run counts, the noise, warnings) and the calibration reference's spread."""
    text = ls.verdict_text()
    lines = ["## Confirmation (re-measured on fresh servers)", ""]
    if text is None:
        lines.append(f"- {ls.unconfirmed_note()}")
    else:
        nested = "  - "  # a comparison block's lines, under its title
        lines += [f"- **{text.headline}**"] + [x if x.startswith(nested) else f"- {x}" for x in text.lines(nested)[1:]]
    lines += [f"- {x}" for x in calibration_text.calibration_lines(ls.scenario, ls.calibration())]
    return [*lines, ""]


def _note_body(study_or_trial: optuna.Study | optuna.Trial) -> str:
    from optuna_dashboard import get_note

    try:
        return get_note(study_or_trial)
    except Exception:
        return ""


def _save_note_if_changed(study_or_trial: optuna.Study | optuna.Trial, body: str) -> bool:
    from optuna_dashboard import save_note

    if _note_body(study_or_trial) == body:
        return False
    save_note(study_or_trial, body)
    return True


def publish_trial(
    trial: optuna.Trial, row: TrialRecord, scenario: Scenario, on_front: bool = False, chosen: bool = False
) -> None:
    """The trial's note, right after it is told."""
    _save_note_if_changed(trial, trial_note(view_of(row, diagnosis_of(row), on_front, chosen), scenario))


class DashboardPublisher(StudyObserver):
    """The trials' notes optuna-dashboard shows of a running study, each written once the trial is
    recorded. It shows the attributes the study writes for it (`shows_trial_attributes`): the
    study's setup, and per trial how it went (status, SLOs violated, flags adjusted, failure,
    capacity, every metric as `m:<key>`) and its diagnosis (`search.study.attributes`)."""

    def __init__(self) -> None:
        self.scenario: Scenario | None = None
        self.scored: TrialScored | None = None  # the trial being recorded, from trial_scored

    def shows_trial_attributes(self) -> bool:
        return True

    def study_started(self, event: StudyStarted) -> None:
        self.scenario = event.scenario

    def trial_scored(self, event: TrialScored) -> None:
        self.scored = event

    def trial_recorded(self, event: TrialRecorded) -> None:
        # The loop tells study_started first, and trial_scored right before each trial_recorded.
        scored, scenario = self.scored, self.scenario
        assert scored is not None and scenario is not None
        view = view_of(
            event.row, scored.diagnosis, on_front=False, chosen=False, origin=origin(scored.trial.user_attrs)
        )
        _save_note_if_changed(scored.trial, trial_note(view, scenario))


def build_figures(ls: LoadedStudy, views: list[TrialView], snapshots: list[ParetoSnapshot]) -> dict[str, Any]:
    """The study page's figures by graph id. The ids are fixed, so publishing again replaces
    the figures instead of adding copies."""
    sc = ls.scenario
    names, directions = sc.objective_names, sc.directions
    out: dict[str, Any] = {}
    pareto = figures.pareto_figure(views, names, directions)
    pareto.update_layout(
        title=(pareto.layout.title.text or "").replace("Pareto front", "Pareto front (feasible, SLOs honoured)", 1)
    )
    out["feasible-pareto-front"] = pareto
    if len(names) in (2, 3):
        measured = figures.measured_study(ls.study, views)
        if measured.trials:
            level = optuna.logging.get_verbosity()
            optuna.logging.set_verbosity(optuna.logging.ERROR)  # "no feasible trials" is no error here
            try:
                fig = optuna.visualization.plot_pareto_front(measured, target_names=names)
            finally:
                optuna.logging.set_verbosity(level)
            fig.update_layout(title="Optuna's plot_pareto_front (honours Trial.constraints; failed trials left out)")
            out["optuna-pareto-front-constraints"] = fig
    if snapshots:
        out["hypervolume-history"] = figures.hypervolume_figure(snapshots, ls.record.hv_reference, names)
    imp, _ = figures.importance_figure(ls.study, views, names, directions)
    if imp is not None:
        out["param-importances"] = imp
    grid = figures.objective_param_figure(views, names, directions, searched_params(ls, views))
    if grid is not None:
        out["objective-vs-parameter"] = grid
    stages = figures.latency_rate_figure(views, latency_slos(ls))
    if stages is not None:
        out["latency-vs-rate"] = stages
    if ls.verdict is not None:
        runs = figures.confirmation_figure(ls.verdict, names, directions, ls.deployment().trial_number)
        if runs is not None:
            out["confirmation-runs"] = runs
    out["bottlenecks"] = figures.bottleneck_figure(views)
    out["all-trials"] = figures.trials_table_figure(views, names)
    for fig in out.values():  # the dashboard draws each in a 450 px high, half-width card
        fig.update_layout(height=DASHBOARD_CARD_HEIGHT, width=None, autosize=True, margin=dict(l=60, r=20, t=50, b=40))
    return out


def publish(storage_url: str, study_name: str, report_path: str | None = None) -> Published:
    """Figures, study note and trial notes for optuna-dashboard. Idempotent."""
    from optuna_dashboard import save_plotly_graph_object

    with Session(database.open_db(storage_url), expire_on_commit=False) as session:
        ls = load_study(session, storage_url, study_name)
        snapshots = queries.front_history(session, ls.record)
    study, views = ls.study, ls.views
    figs = build_figures(ls, views, snapshots)
    for gid, fig in figs.items():
        save_plotly_graph_object(study, fig, graph_object_id=gid)
    _save_note_if_changed(study, study_note(ls, views, report_path))
    written = 0
    ids = {t.number: t._trial_id for t in study.get_trials(deepcopy=False)}
    for v in views:
        if v.number in ids:
            written += _save_note_if_changed(optuna.trial.Trial(study, ids[v.number]), trial_note(v, ls.scenario))
    return Published(study_name, list(figs), written)


def serve(storage_url: str, host: str = "127.0.0.1", port: int = 8080) -> None:
    """optuna-dashboard in this process (blocks). SQLite: a long busy timeout, as the study writes."""
    from optuna_dashboard import run_server

    storage = optuna.storages.RDBStorage(
        storage_url,
        engine_kwargs=database.engine_kwargs(storage_url),
        skip_compatibility_check=True,
        skip_table_creation=True,
    )
    print(f"optuna-dashboard on http://{host}:{port} ({redacted(storage_url)}); Ctrl-C stops it", flush=True)
    run_server(storage, host=host, port=port)


def _port_taken(host: str, port: int) -> str | None:
    """Why `port` cannot be served on (None: it can); checked before anything is published."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError as e:
            return e.strerror or str(e)
    return None


def publish_and_serve(storage_url: str, study_name: str, port: int = 8080) -> int:
    """`autotune dashboard`: publish the study (if it is there), then serve every study of the DB."""
    if (why := _port_taken("127.0.0.1", port)) is not None:
        print(
            f"autotune: error: --port {port}: cannot serve on 127.0.0.1:{port} ({why}); pass a free "
            f"port with --port (make dashboard PORT=)",
            file=sys.stderr,
        )
        return 2
    try:
        done = publish(storage_url, study_name)
        print(
            f"published study {study_name!r}: {len(done.figures)} figures on the study page, a study "
            f"note, {done.trial_notes} trial notes written or updated",
            flush=True,
        )
    except LookupError as e:
        print(f"note: {e}; serving the database as it is", file=sys.stderr)
    try:
        serve(storage_url, port=port)
    except KeyboardInterrupt:
        pass
    return 0
