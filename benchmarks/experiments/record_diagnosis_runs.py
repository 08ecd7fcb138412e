"""Record real runs with a known bottleneck, as fixtures for `tests/unit/objectives/test_diagnosis.py`.

Each case starts the real vLLM server on the default model with a configuration that forces
one bottleneck, loads it with our own load generator, and writes what the study would store
(flat metrics incl. the server's /metrics deltas, config, workload) to
`tests/fixtures/runs/<case>.json`:

* preemption:    a KV cache of ~20 blocks (memory_utilization 0.02 of the 1 GiB CPU budget)
                 under 12 closed-loop users whose requests each grow to ~5 blocks;
* queue_bound:   max_num_seqs 2 at an open-loop rate about twice what two slots can serve;
* client_bound:  a light load the server serves easily, but the client runs pinned onto the
                 vLLM worker's CPU core at nice 19, so it falls behind its own schedule;
* client_control: the same server and load with an unstarved client (must not be client-bound).

    .venv/bin/python -m benchmarks.experiments.record_diagnosis_runs [case ...]

Takes ~1 min per server on a 2-core machine. Timings differ between machines and runs; what
the fixtures keep is which symptom dominates, and the tests assert only that.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

OUT_DIR = ROOT / "tests" / "fixtures" / "runs"

# Completions endpoint: prompt lengths exact, no chat template in between.
CASES: dict[str, dict] = {
    "preemption": {
        "server": {"max_model_len": 1024, "memory_utilization": 0.02, "max_num_seqs": 16},
        "workload": {
            "endpoint": "completions",
            "seed": 7,
            "warmup_requests": 2,
            "num_requests": 24,
            "request_timeout_s": 300,
            "prompt_tokens": {"dist": "uniform", "low": 256, "high": 384},
            "output_tokens": {"dist": "uniform", "low": 128, "high": 192},
            "arrival": {"mode": "closed", "concurrency": 12},
        },
    },
    "queue_bound": {
        "server": {"max_model_len": 1024, "memory_utilization": 0.25, "max_num_seqs": 2},
        "workload": {
            "endpoint": "completions",
            "seed": 11,
            "warmup_requests": 2,
            "duration_s": 20,
            "request_timeout_s": 300,
            "prompt_tokens": {"dist": "uniform", "low": 100, "high": 160},
            "output_tokens": {"dist": "uniform", "low": 48, "high": 80},
            "arrival": {"mode": "poisson", "rate": 6.0},
        },
    },
    "client_bound": {
        "server": {"max_model_len": 1024, "memory_utilization": 0.25, "max_num_seqs": 64},
        "workload": {
            "endpoint": "completions",
            "seed": 13,
            "warmup_requests": 2,
            "duration_s": 20,
            "request_timeout_s": 300,
            "prompt_tokens": {"dist": "uniform", "low": 32, "high": 64},
            "output_tokens": {"dist": "uniform", "low": 8, "high": 16},
            "arrival": {"mode": "poisson", "rate": 8.0},
        },
        "starve_client": True,
        "control": "client_control",  # same server, same load, client not starved
    },
}
# Starved client: CFS gives a nice-19 task ~1.5% of a core shared with a busy nice-0 one.
CLIENT_NICE = 19


def _worker_core(server) -> int | None:
    """The CPU the vLLM worker is pinned to (the CPU build binds its OMP threads)."""
    import psutil

    for p in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            if os.getpgid(p.pid) != server.pgid:
                continue
            name = " ".join(p.info["cmdline"] or []) or p.info["name"] or ""
            if "VLLM::Worker" in name or "VLLM::Worker" in (p.info["name"] or ""):
                cpus = p.cpu_affinity()
                return cpus[0] if len(cpus) == 1 else None
        except (psutil.NoSuchProcess, ProcessLookupError, psutil.AccessDenied):
            continue
    return None


def _run_client(base_url: str, model: str, spec_json: dict, out: Path) -> None:
    """--client mode: one load run, its result as JSON (run in a child so nice/taskset apply to it only)."""
    from loadgen import LoadOptions, WorkloadSpec, run_load_sync

    spec = WorkloadSpec.model_validate(spec_json)
    result = run_load_sync(base_url, None, spec, options=LoadOptions(tokenizer_path=model))
    doc = result.to_json(include_records=False)
    doc["server_diagnostics"] = result.server_diagnostics()
    out.write_text(json.dumps(doc, default=float))


def _load(server, ctx, workload: dict, starve: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [
            sys.executable,
            __file__,
            "--client",
            server.base_url,
            str(ctx.model.path),
            json.dumps(workload),
            str(out),
        ]
        note = "client unstarved"
        if starve:
            core = _worker_core(server)
            if core is None:
                raise SystemExit("could not find the vLLM worker's pinned core")
            cmd = ["taskset", "-c", str(core), "nice", "-n", str(CLIENT_NICE), *cmd]
            note = f"client pinned to the worker's core {core} at nice {CLIENT_NICE}"
        subprocess.run(cmd, check=True, cwd=ROOT)
        doc = json.loads(out.read_text())
        doc["client_setup"] = note
        return doc


def record(name: str, ctx) -> list[Path]:
    from serving import resolve_server_args
    from serving.process import launch

    case = CASES[name]
    values = {"dtype": ctx.dtype, "enforce_eager": True, **case["server"]}
    values = {k: v for k, v in values.items() if v is not None}
    args = resolve_server_args(values, ctx)
    log = Path(tempfile.mkdtemp(prefix=f"diag-{name}-")) / "server.log"
    written = []
    with launch(ctx, args, log) as server:
        runs = [(name, case.get("starve_client", False))]
        if case.get("control"):
            runs.append((case["control"], False))
        for run_name, starve in runs:
            t0 = time.monotonic()
            doc = _load(server, ctx, case["workload"], starve)
            fixture = {
                "case": run_name,
                "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "vllm": ctx.installed.label(),
                "hardware": ctx.hardware.describe(),
                "model": ctx.model.path.name,
                "config": values,
                "flags": args.flags,
                "workload": case["workload"],
                "client_setup": doc["client_setup"],
                "target_rate": doc["target_rate"],
                "achieved_send_rate": doc["achieved_send_rate"],
                "error_kinds": doc["error_kinds"],
                "notes": doc["notes"],
                "metrics": doc["metrics"],
                "server_diagnostics": doc["server_diagnostics"],
            }
            path = OUT_DIR / f"{run_name}.json"
            path.write_text(json.dumps(fixture, indent=1, default=float) + "\n")
            written.append(path)
            m = doc["metrics"]
            print(
                f"{run_name}: {time.monotonic() - t0:.0f} s; ttft p95 {m['ttft_p95_ms']:.0f} ms, "
                f"queue mean {m['server_queue_time_mean_ms']:.0f} ms, waiting peak "
                f"{m['server_waiting_peak']:.0f}, preemptions {m['server_preemptions']:.0f}, "
                f"kv peak {m['server_kv_cache_usage_peak']:.2f}, lag p99 "
                f"{m['schedule_lag_p99_ms']:.0f} ms -> {path.relative_to(ROOT)}",
                flush=True,
            )
    return written


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        _, _, base_url, model, spec, out = sys.argv
        _run_client(base_url, model, json.loads(spec), Path(out))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="*", help=f"any of {', '.join(CASES)} (default: all)")
    names = ap.parse_args().cases or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; cases: {', '.join(CASES)}")
    from serving import launch_context

    ctx = launch_context()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name in names:
        record(name, ctx)


if __name__ == "__main__":
    main()
