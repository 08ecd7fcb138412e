"""A synthetic multi-turn trace in our JSONL format, for trying `autotune scenario from-trace` on
sessions without a production log. SYNTHETIC: no real traffic went into it.

Sessions start as a Poisson process (one every 45 s on average); each has 2-8 turns (lognormal,
median 4) behind one shared 180-token system prompt (`prefix_id: system`). A turn's prompt is
the whole conversation so far: the previous turn's prompt and answer, then the new user message
(lognormal, median 60 tokens, 8-160); its answer is lognormal (median 90 tokens, 16-200). The
next turn arrives after the answer (0.4 s + 20 ms per output token) and the user's pause
(exponential, mean 8 s), so the gaps a trace shows hold both. Rows are in arrival order, the
sessions interleaved, each row naming its `session_id` and `turn`.

The shipped example, `benchmarks/data/sessions-synthetic.jsonl`, is this script's default output:

    .venv/bin/python -m benchmarks.sessions_synthetic --out benchmarks/data/sessions-synthetic.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

SYSTEM_TOKENS = 180
SHIPPED = Path(__file__).parent / "data" / "sessions-synthetic.jsonl"


def _lognormal(rng: np.random.Generator, median: float, sigma: float, low: int, high: int) -> int:
    return int(np.clip(np.rint(rng.lognormal(math.log(median), sigma)), low, high))


def session_rows(sessions: int = 40, seed: int = 0) -> list[dict]:
    """The trace's rows (module docstring), in arrival order."""
    rng = np.random.default_rng(seed)
    starts = np.cumsum(rng.exponential(45.0, sessions))
    rows = []
    for s, start in enumerate(starts):
        turns = _lognormal(rng, 4, 0.45, 2, 8)
        t, prompt, before = float(start), 0, SYSTEM_TOKENS
        for turn in range(1, turns + 1):
            prompt = before + _lognormal(rng, 60, 0.5, 8, 160)
            output = _lognormal(rng, 90, 0.5, 16, 200)
            rows.append(
                {
                    "timestamp": round(t, 3),
                    "session_id": f"s{s:03d}",
                    "turn": turn,
                    "prompt_tokens": prompt,
                    "output_tokens": output,
                    "prefix_id": "system",
                    "prefix_tokens": SYSTEM_TOKENS,
                }
            )
            before = prompt + output
            t += 0.4 + 0.02 * output + rng.exponential(8.0)
    rows.sort(key=lambda r: (r["timestamp"], r["session_id"]))
    return rows


def sessions_jsonl(sessions: int = 40, seed: int = 0) -> str:
    return "".join(json.dumps(r) + "\n" for r in session_rows(sessions, seed))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=SHIPPED)
    p.add_argument("--sessions", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.sessions < 1:
        print("--sessions: at least 1", file=sys.stderr)
        return 2
    text = sessions_jsonl(args.sessions, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"{args.out}: {args.sessions} sessions, {text.count(chr(10))} turns, synthetic (jsonl format)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
