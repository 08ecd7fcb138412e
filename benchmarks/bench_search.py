"""Which sampler finds the best configuration for the fewest trials: every sampler of
`search.samplers` x seeds x budgets, each a real study on the replay executor
(`benchmarks.replayed_study`), scored on the surrogate's noiseless means.

    python -m benchmarks.bench_search [--landscape FILE] [--seeds 20] [--budgets 5 10 20 40] [--jobs 2]

Per sampler and budget: the hypervolume of the configs the study measured (those truly
feasible, on surrogate means) as a share of the reference front's (the landscape's own configs,
on the same means; a search can pass 100%, finding configs the landscape lacks); the trials it
took to reach 90% and 95% of it (from the largest budget's runs); what the study deploys after
its confirmation (true capacity and TTFT, regret against the best feasible config, how often it is infeasible or a
baseline kept while a config 10% better exists); the wall time the budget costs on the
landscape's machine. Writes runs/bench-search/summary.json and prints the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from app.expected_errors import reported
from benchmarks.replayed_study import (
    CPU_LANDSCAPE,
    PRIOR_BUDGET,
    REPO,
    WARM,
    World,
    run_study,
    world,
)
from search.replay import CAPACITY, Landscape, LandscapeError, cross_validated
from search.samplers import SAMPLERS, scenario_default

BUDGETS = (5, 10, 20, 40)
SHARES = (0.9, 0.95)


def reach(curve: list[float], share: float, above: int) -> int:
    """Trials to reach `share` of the reference hypervolume; `above` when never."""
    return next((i + 1 for i, v in enumerate(curve) if v >= share), above)


def _quartiles(values: list[float]) -> dict[str, float]:
    q1, med, q3 = np.percentile(values, [25, 50, 75]) if values else (math.nan,) * 3
    return {"median": float(med), "q1": float(q1), "q3": float(q3)}


def summarize(runs: list[dict[str, Any]], w: World, budgets: tuple[int, ...], seeds: int) -> dict[str, Any]:
    trial_s, _ = w.landscape.typical_trial_s()
    cal_s = w.landscape.calibration.get("seconds", 0.0)
    samplers = {}
    for name in dict.fromkeys(r["sampler"] for r in runs):
        mine = [r for r in runs if r["sampler"] == name]
        largest = max(r["budget"] for r in mine)  # a slow sampler's may be its own (OWN_PLANS)
        longest = [r for r in mine if r["budget"] == largest]
        entry: dict[str, Any] = {
            f"trials_to_{round(s * 100)}": float(np.median([reach(r["curve"], s, largest + 1) for r in longest]))
            for s in SHARES
        }
        entry["reached_95"] = sum(reach(r["curve"], 0.95, largest + 1) <= largest for r in longest) / len(longest)
        entry["largest_budget"] = largest
        entry["budgets"] = {}
        for b in sorted({r["budget"] for r in mine}):
            at = [r for r in mine if r["budget"] == b]
            dep = [r["deployed"] for r in at]
            ok = [d for d in dep if d and d["feasible"]]
            entry["budgets"][str(b)] = {
                "seeds": len(at),
                "hv": _quartiles([r["hv"] for r in at]),
                "deployed_capacity": _quartiles([d[CAPACITY] for d in ok]),
                "deployed_ttft": _quartiles([d[w.scenario.objective_names[0]] for d in ok]),
                "regret": _quartiles([d["regret"] for d in dep if d]),
                "within_10pct": sum(1 for d in ok if d["regret"] <= 0.1) / len(at),
                "deployed_infeasible": sum(1 for d in dep if d and not d["feasible"]) / len(at),
                "nothing_deployed": sum(1 for d in dep if d is None) / len(at),
                "baseline_kept_when_better": sum(1 for d in dep if d and d["baseline"] and d["better_existed"])
                / len(at),
                "search_wall_min": (cal_s + b * trial_s) / 60,
                "bench_s": float(np.mean([r["seconds"] for r in at])),
                "bench_cpu_s": float(np.mean([r.get("cpu_s", math.nan) for r in at])),
            }
        samplers[name] = entry
    return {
        "default": scenario_default(w.scenario),
        "landscape": str(w.landscape.provenance.get("command", "")),
        "synthetic": w.landscape.synthetic,
        "budgets": list(budgets),
        "largest_budget": max(budgets),
        "seeds": seeds,
        "reference": {
            "hypervolume": w.reference_hv,
            "point": list(w.reference_point),
            "best": {k: v for k, v in w.best.items() if k != "config"},
            "best_config": w.best["config"],
        },
        "typical_trial_s": trial_s,
        "samplers": samplers,
    }


# Optuna's GP sampler fits a GP per objective and per SLO constraint at every proposal: a GP study
# takes about 7, 28 and 70 CPU-s at 5, 10 and 20 trials here, every other sampler's 0.1-1.4 s. At
# the table's budgets and seeds GP alone would take 35 CPU-min; its rows run at their own budget
# and seeds instead (budgets, seeds): budget 20, where the samplers separate on the recorded
# landscape, over 8 seeds, as the CI check compares them (9 CPU-min; docs/benchmarks.md).
# `--all-budgets` runs them at the table's.
OWN_PLANS = {"gp": ((20,), 8)}


def plan(sampler: str, budgets: tuple[int, ...], seeds: int, all_budgets: bool = False) -> tuple[tuple[int, ...], int]:
    """The budgets and seeds `sampler`'s row runs at: the table's, or its own (`OWN_PLANS`) among
    the budgets asked for (all that were asked, where none of its own was)."""
    own = None if all_budgets else OWN_PLANS.get(sampler.removesuffix(WARM))
    if own is None:
        return budgets, seeds
    return tuple(b for b in own[0] if b in budgets) or budgets, min(seeds, own[1])


def bench(
    landscape_path: Path,
    samplers: list[str],
    seeds: int,
    budgets: tuple[int, ...],
    jobs: int,
    all_budgets: bool = False,
    warm_from: Path | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Every run, spread over `jobs` processes (the costliest first: the rows with a plan of their
    own, then the largest budgets), and their summary."""
    plans = {s: plan(s, budgets, seeds, all_budgets) for s in samplers}
    prior = str(warm_from) if warm_from else None
    tasks = sorted(
        (
            (str(landscape_path), s, seed, b, prior)
            for s in samplers
            for seed in range(plans[s][1])
            for b in plans[s][0]
        ),
        key=lambda t: (plans[t[1]] == (budgets, seeds), -t[3]),
    )
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            runs = list(pool.map(run_study, *zip(*tasks), chunksize=1))
    else:
        runs = [run_study(*t) for t in tasks]
    runs.sort(key=lambda r: (samplers.index(r["sampler"]), r["budget"], r["seed"]))  # the table's order
    return summarize(runs, world(str(landscape_path)), budgets, seeds), runs


COLUMNS = (
    "sampler",
    "budget",
    "HV median [IQR]",
    "to 90%",
    "to 95%",
    "deployed cap",
    "regret",
    "within 10%",
    "infeasible",
    "baseline kept",
    "wall min",
)


def _label(name: str, summary: dict[str, Any], seeds: int) -> str:
    default = " (default)" if name == summary["default"] else ""
    fewer = f" ({seeds} seeds)" if seeds < summary.get("seeds", seeds) else ""
    return name + default + fewer


def rows(summary: dict[str, Any]) -> list[tuple[str, ...]]:
    """The table's rows (COLUMNS), as the terminal and docs/search.md show them."""
    out = []
    for name, s in summary["samplers"].items():
        largest = s["largest_budget"]
        capped = f" (run to {largest})" if largest < summary["largest_budget"] else ""
        for b, e in s["budgets"].items():
            first = b == next(iter(s["budgets"]))

            def trials(k):
                v = s[k]
                return ((f">{largest}" if v > largest else f"{v:g}") + capped) if first else ""

            hv = e["hv"]
            out.append(
                (
                    _label(name, summary, e["seeds"]) if first else "",
                    b,
                    f"{hv['median']:.2f} [{hv['q1']:.2f}-{hv['q3']:.2f}]",
                    trials("trials_to_90"),
                    trials("trials_to_95"),
                    f"{e['deployed_capacity']['median']:.2f}",
                    f"{e['regret']['median']:.0%}",
                    f"{e['within_10pct']:.0%}",
                    f"{e['deployed_infeasible']:.0%}",
                    f"{e['baseline_kept_when_better']:.0%}",
                    f"{e['search_wall_min']:.0f}",
                )
            )
    return out


def table(summary: dict[str, Any]):
    from rich.table import Table

    t = Table(title="bench-search" + (" (SYNTHETIC landscape)" if summary["synthetic"] else ""))
    for col in COLUMNS:
        t.add_column(col, justify="right")
    for row in rows(summary):
        t.add_row(*row)
    return t


def markdown(summary: dict[str, Any]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows(summary)]) + "\n"


def accuracy_table(landscape: Landscape):
    """The surrogate's held-out accuracy (grouped 5-fold cross-validation), as the docs quote it."""
    from rich.table import Table

    accuracy, classifier = cross_validated(landscape)
    t = Table(title="surrogate, configs held out" + (" (SYNTHETIC landscape)" if landscape.synthetic else ""))
    for col in ("metric", "Spearman", "median rel. error", "repeat noise", "configs"):
        t.add_column(col, justify="right")
    for a in accuracy:
        t.add_row(a.metric, f"{a.spearman:.2f}", f"{a.median_rel_error:.0%}", f"{a.noise_rel:.0%}", str(a.configs))
    t.caption = (
        f"serves-or-not classifier: {classifier:.0%} of held-out configs right"
        if classifier is not None
        else "every config served: no classifier"
    )
    return t, {"metrics": [a.__dict__ for a in accuracy], "classifier": classifier}


def plot(summary: dict[str, Any], path: Path) -> None:
    import plotly.graph_objects as go

    fig = go.Figure()
    for name, s in summary["samplers"].items():
        b = list(s["budgets"])
        fig.add_trace(
            go.Scatter(
                x=[int(x) for x in b],
                y=[s["budgets"][x]["hv"]["median"] for x in b],
                name=name,
                mode="lines+markers",
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": [s["budgets"][x]["hv"]["q3"] - s["budgets"][x]["hv"]["median"] for x in b],
                    "arrayminus": [s["budgets"][x]["hv"]["median"] - s["budgets"][x]["hv"]["q1"] for x in b],
                },
            )
        )
    title = "Share of the reference hypervolume found, median and IQR over seeds"
    fig.update_layout(
        title=title + (" (synthetic landscape)" if summary["synthetic"] else ""),
        xaxis={"title": "trials (budget)", "type": "log"},
        yaxis={"title": "hypervolume share"},
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(path, include_plotlyjs="cdn")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--landscape", type=Path, default=CPU_LANDSCAPE)
    ap.add_argument(
        "--samplers",
        nargs="+",
        default=None,
        choices=list(SAMPLERS) + [s + WARM for s in SAMPLERS],
        help=f"'NAME{WARM}': NAME warm-started from an earlier {PRIOR_BUDGET}-trial study of its own "
        f"(default: every sampler, and the scenario's default warm-started)",
    )
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--budgets", type=int, nargs="+", default=list(BUDGETS))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "bench-search")
    ap.add_argument(
        "--all-budgets",
        action="store_true",
        help=f"run every row at the table's budgets and seeds (default: some at their own (budgets, seeds): {OWN_PLANS})",
    )
    ap.add_argument(
        "--warm-from",
        type=Path,
        default=None,
        metavar="LANDSCAPE",
        help=f"the '{WARM}' rows' earlier study runs on this landscape (another load of the same "
        f"space, say) instead of the bench's own",
    )
    args = ap.parse_args(argv)
    return reported("bench_search.py", lambda: _run(args), also=(LandscapeError,))


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console

    t0 = time.monotonic()
    samplers = args.samplers or [*SAMPLERS, scenario_default(world(str(args.landscape)).scenario) + WARM]
    summary, runs = bench(
        args.landscape, samplers, args.seeds, tuple(sorted(args.budgets)), args.jobs, args.all_budgets, args.warm_from
    )
    summary["warm_from"] = str(args.warm_from) if args.warm_from else None
    summary["wall_s"] = time.monotonic() - t0
    summary["jobs"] = args.jobs
    console = Console()
    acc_table, summary["surrogate_accuracy"] = accuracy_table(world(str(args.landscape)).landscape)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps({**summary, "runs": runs}, indent=1, default=str) + "\n")
    plot(summary, args.out / "hypervolume.html")
    (args.out / "table.md").write_text(markdown(summary))
    console.print(acc_table)
    console.print(table(summary))
    console.print(
        f"{len(runs)} studies in {summary['wall_s']:.0f} s on {args.jobs} processes; "
        f"{args.out / 'summary.json'}, {args.out / 'table.md'}, {args.out / 'hypervolume.html'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
