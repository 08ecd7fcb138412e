"""A synthetic request trace in the Azure LLM inference trace's format (or Mooncake's), for trying
trace replay without a production log. SYNTHETIC: no real traffic went into it.

One day of traffic: a daily swing (the rate follows a sine, lowest at 04:00 and highest at
16:00, peak / trough = `swing`), Poisson arrivals at that rate, plus bursts (every ~40 min a
batch of 10-60 requests a few hundred ms apart, as a job or a retry storm sends them). Prompt
lengths are lognormal (median 300 tokens, 1 % of them beyond 4,096, so clipping is
exercised), outputs lognormal (median 60): the shape of Azure's conversation trace, scaled
down to what a 2-core CPU serves, as the shipped `mixed` scenario is.

The Azure format: `TIMESTAMP,ContextTokens,GeneratedTokens`, timestamps as the trace writes
them (`2023-11-16 18:15:46.6805900`). The Mooncake format adds prefix blocks: `hash_ids`, 512
tokens each, where 60 % of requests start with one of 4 system prompts (1-2 blocks).

    .venv/bin/python -m benchmarks.trace_synthetic --out runs/trace/azure-synthetic.csv
    .venv/bin/python -m benchmarks.trace_synthetic --format mooncake --out runs/trace/mooncake-synthetic.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DAY_S = 86_400.0
START = np.datetime64("2023-11-16T00:00:00", "ns")
BLOCK = 512


@dataclass(frozen=True)
class SyntheticTrace:
    arrival_s: np.ndarray  # seconds since midnight, sorted
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    system_prompt: np.ndarray  # -1: none, else which of the shared system prompts


def synthetic_trace(
    requests: int = 2400, seed: int = 0, swing: float = 4.0, burst_share: float = 0.25, span_s: float = DAY_S
) -> SyntheticTrace:
    """`requests` requests over `span_s` seconds (module docstring), `burst_share` of them in bursts."""
    rng = np.random.default_rng(seed)
    in_bursts = int(requests * burst_share)
    steady = requests - in_bursts
    # Daily swing by inversion of the cumulative rate: rate(t) ~ 1 + a sin(2 pi (t/day - 10/24)),
    # lowest at 04:00, highest at 16:00; a = (swing - 1) / (swing + 1).
    a = (swing - 1) / (swing + 1)
    grid = np.linspace(0, span_s, 20_001)
    phase = 2 * math.pi * (grid / DAY_S - 10 / 24)
    cum = grid - a * DAY_S / (2 * math.pi) * (np.cos(phase) - math.cos(2 * math.pi * -10 / 24))
    cum /= cum[-1]
    t_steady = np.interp(np.sort(rng.random(steady)), cum, grid)
    bursts = []
    left = in_bursts
    while left > 0:
        size = min(left, int(rng.integers(10, 61)))
        t0 = rng.uniform(0, span_s)
        bursts.append(t0 + np.cumsum(rng.exponential(0.3, size)))
        left -= size
    t = np.sort(np.concatenate([t_steady, *bursts]))
    t = np.minimum(t, span_s - 1e-3)
    prompt = np.maximum(4, np.rint(rng.lognormal(math.log(300), 0.9, requests))).astype(np.int64)
    long = rng.random(requests) < 0.01
    prompt[long] = rng.integers(4200, 6000, int(long.sum()))
    output = np.clip(np.rint(rng.lognormal(math.log(60), 0.8, requests)), 1, 1024).astype(np.int64)
    system = np.where(rng.random(requests) < 0.6, rng.integers(0, 4, requests), -1)
    return SyntheticTrace(t, prompt, output, system)


def azure_csv(trace: SyntheticTrace) -> str:
    """The Azure LLM inference trace's CSV: TIMESTAMP (7 fractional digits), ContextTokens, GeneratedTokens."""
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    stamps = START + np.rint(trace.arrival_s * 1e9).astype("timedelta64[ns]")
    for s, p, o in zip(stamps, trace.prompt_tokens, trace.output_tokens):
        text = str(s).replace("T", " ")  # 2023-11-16 18:15:46.680590000
        lines.append(f"{text[:27]},{p},{o}")
    return "\n".join(lines) + "\n"


def mooncake_jsonl(trace: SyntheticTrace) -> str:
    """Mooncake's JSONL: timestamp (ms), input_length, output_length, hash_ids (512-token blocks);
    a system prompt is 1 or 2 blocks (its own ids), the rest of the prompt the request's own ids."""
    next_id = 1000
    lines = []
    for t, p, o, sp in zip(trace.arrival_s, trace.prompt_tokens, trace.output_tokens, trace.system_prompt):
        blocks = math.ceil(int(p) / BLOCK)
        shared = [] if sp < 0 else [10 * int(sp) + k for k in range(1 + int(sp) % 2)][:blocks]
        own = list(range(next_id, next_id + blocks - len(shared)))
        next_id += len(own)
        row = {"timestamp": round(float(t) * 1000), "input_length": int(p), "output_length": int(o)}
        lines.append(json.dumps({**row, "hash_ids": shared + own}))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--format", choices=("azure", "mooncake"), default="azure")
    p.add_argument("--requests", type=int, default=2400)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--swing", type=float, default=4.0, help="peak / trough rate of the daily swing")
    args = p.parse_args(argv)
    if args.requests < 2:
        print("--requests: at least 2", file=sys.stderr)
        return 2
    trace = synthetic_trace(args.requests, args.seed, args.swing)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(azure_csv(trace) if args.format == "azure" else mooncake_jsonl(trace))
    print(f"{args.out}: {args.requests} requests over one day, synthetic ({args.format} format)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
