"""The parity benchmark's tables (`benchmarks.bench_load_parity`): per point, each metric's
median [min-max] over runs per tool and ours over vLLM's; the docs' markdown with a paired 95 %
interval; each tool read against the server's own view of the same run.
"""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.load_runs import Spread
from benchmarks.parity_point import METRICS, VLLM, Point
from objectives.statistics import relative_difference

TABLE_KEYS = ["ttft_median_ms", "tpot_median_ms", "itl_median_ms", "e2el_median_ms", "output_throughput"]


def summarize(point: Point, rows: list[dict], tools: list[str], console: Console) -> dict:
    ref = reference(tools)
    by_tool = {t: [r for r in rows if r["tool"] == t] for t in tools}
    first = rows[0]
    same_prompts = all(r["prompt_lens"] == first["prompt_lens"] for r in rows)
    same_outputs = all(r["output_lens"] == first["output_lens"] for r in rows)
    gaps = (
        np.concatenate(
            [
                np.abs(np.asarray(o["send_offsets"]) - np.asarray(t["send_offsets"]))
                for o, t in zip(by_tool[tools[0]], by_tool[ref])
            ]
        )
        if tools[0] != ref
        else np.zeros(1)
    )

    table = Table(
        title=f"{point.label()}: {' + '.join(str(len(v)) for v in by_tool.values())} runs, median [min-max] over runs"
    )
    table.add_column("metric")
    for t in tools:
        table.add_column(t, justify="right")
    others = [t for t in tools if t != ref]
    for t in others:
        table.add_column(f"{t} / {ref}", justify="right")
    summary: dict = {}
    extra = [
        ("server mean ITL (ms)", "server_itl_ms"),
        ("server mean E2E (ms)", "server_e2e_ms"),
        ("tool process CPU (s)", "tool_cpu_s"),
        ("tool CPU in the run (s)", "sampled_window_cpu_s"),
        ("server CPU: API server (s)", "cpu_api_s"),
        ("server CPU: engine core (s)", "cpu_engine_s"),
        ("server CPU: worker (s)", "cpu_worker_s"),
        ("worker main thread waiting for a CPU (s)", "wait_worker_s"),
        ("engine core main thread waiting (s)", "wait_engine_s"),
        ("tool context switches, voluntary", "ctx_voluntary"),
        ("tool context switches, involuntary", "ctx_involuntary"),
        ("schedule lag p99 (ms)", "lag_p99_ms"),
        ("other processes (cores)", "foreign_cores"),
        ("machine idle (cores)", "idle_cores"),
        ("stolen by the hypervisor (cores)", "steal_cores"),
    ]
    for label, key in [(lab, k) for lab, k, _ in METRICS] + extra:
        spreads = {t: Spread.of([r[key] for r in by_tool[t]]) for t in tools}
        summary[key] = {t: asdict(s) for t, s in spreads.items()}
        cells = [spreads[t].fmt(2 if spreads[t].median < 10 else 1) for t in tools]
        for t in others:
            b = spreads.get(ref)
            ratio = spreads[t].median / b.median if b is not None and b.median else math.nan
            summary[key][f"{t}/{ref}"] = ratio
            cells.append(f"{ratio:.3f}")
        table.add_row(label, *cells)
    for t in tools:
        cpu = {}
        for r in by_tool[t]:
            for k, v in r["server_cpu_s"].items():
                cpu.setdefault(k, []).append(v)
        summary.setdefault("server_cpu_s", {})[t] = {k: asdict(Spread.of(v)) for k, v in cpu.items()}
    console.print(table)
    console.print(
        f"same prompt lengths (server usage) in every run: {same_prompts}; same output lengths: "
        f"{same_outputs}; send times differ by {1000 * float(np.median(gaps)):.1f} ms (median; "
        f"max {1000 * float(gaps.max()):.0f} ms)"
    )
    return {
        "point": asdict(point),
        "summary": summary,
        "same_prompts": same_prompts,
        "same_outputs": same_outputs,
        "schedule_gap_median_s": float(np.median(gaps)),
        "schedule_gap_max_s": float(gaps.max()),
        "runs": [{k: v for k, v in r.items() if k not in ("prompt_lens", "output_lens", "send_offsets")} for r in rows],
    }


def reference(tools: list[str]) -> str:
    """The `vllm bench serve` variant ours is compared with: the first named."""
    return next(t for t in tools if t in VLLM)


def ours_compared(tools: list[str]) -> str:
    """Our client's variant compared with it: the first named (every other tool is ours)."""
    return next(t for t in tools if t not in VLLM)


def markdown(results: list[dict], tools: list[str]) -> str:
    """One row per point and metric family, for docs/measurement.md."""
    ours = ours_compared(tools)
    ref = reference(tools)
    heads = [
        "point",
        "tool",
        "TTFT median",
        "TPOT median",
        "ITL median",
        "E2EL median",
        "output tok/s",
        "other processes (cores)",
    ]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    # (medians over runs, [min-max]; ms, output tokens/s)
    for res in results:
        p = res["point"]
        s = res["summary"]
        label = f"{p['endpoint']} {p['prompt_tokens']}/{p['output_tokens']} @ {p['rate']:g}/s (N={p['num_requests']})"

        def cell(t, k, s=s):
            d = s[k][t]
            digits = 2 if d["median"] < 10 else 1 if d["median"] < 1000 else 0
            return f"{d['median']:.{digits}f} [{d['low']:.{digits}f}-{d['high']:.{digits}f}]"

        def others(t, s=s):
            d = s["foreign_cores"][t]
            return f"{d['median']:.2f} [{d['low']:.2f}-{d['high']:.2f}]"

        lines.append(f"| {label} | {ours} | " + " | ".join(cell(ours, k) for k in TABLE_KEYS) + f" | {others(ours)} |")
        lines.append(f"| | {ref} | " + " | ".join(cell(ref, k) for k in TABLE_KEYS) + f" | {others(ref)} |")

        def ratio(k, res=res):
            # Paired by repetition (each pair ran back to back); a bootstrap 95 % interval.
            by_rep = {}
            for r in res["runs"]:
                by_rep.setdefault(r["rep"], {})[r["tool"]] = r[k]
            pairs = [(v[ours], v[ref]) for v in by_rep.values() if ours in v and ref in v]
            iv = relative_difference([a for a, _ in pairs], [b for _, b in pairs], paired=True)
            return f"{1 + iv.value:.3f} [{1 + iv.low:.2f}-{1 + iv.high:.2f}]"

        lines.append("| | ratio [95 % interval] | " + " | ".join(ratio(k) for k in TABLE_KEYS) + " | |")
    return "\n".join(lines) + "\n"


# Each tool's reading over the server's own view of the same run (its /metrics histograms: mean
# TTFT, inter-token latency and E2E). The server's speed drifts between runs on this machine
# (TPOT 8.5-12 ms over six alternating runs of one point), and three runs per tool can land
# unevenly on that drift; this quotient cancels it: what the client adds to what the server saw.
SERVER_VIEW = (
    ("TTFT", "ttft_median_ms", "server_ttft_ms"),
    ("TPOT", "tpot_median_ms", "server_itl_ms"),
    ("E2EL", "e2el_median_ms", "server_e2e_ms"),
)


def against_server(results: list[dict], tools: list[str]) -> str:
    """Per point: each tool's median over runs of (its median / the server's mean), and ours over
    vLLM's: 1.00 when both tools read the server alike, whatever its speed in each run."""
    ours, ref = ours_compared(tools), reference(tools)
    heads = ["point", *(f"{name}: ours / {ref} / ratio" for name, _, _ in SERVER_VIEW)]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for res in results:
        p = res["point"]
        cells = []
        for _, key, server_key in SERVER_VIEW:
            q = {
                t: float(
                    np.median(
                        [
                            r[key] / r[server_key]
                            for r in res["runs"]
                            if r["tool"] == t and math.isfinite(r.get(server_key) or math.nan) and r[server_key] > 0
                        ]
                        or [math.nan]
                    )
                )
                for t in (ours, ref)
            }
            cells.append(f"{q[ours]:.3f} / {q[ref]:.3f} / {q[ours] / q[ref]:.3f}")
        lines.append(
            f"| {p['endpoint']} {p['prompt_tokens']}/{p['output_tokens']} @ {p['rate']:g}/s | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines) + "\n"
