"""What a stream of requests looks like: rate over time, lengths, burstiness, prefix sharing.

Pure functions over arrays, so one definition describes a trace file, the window a run
replays and what a server received (the run's send times and prompts): the replay's
statistics table compares the three with the same arithmetic.

- mean rate: (n - 1) / (last arrival - first arrival), requests per second;
- inter-arrival CV: standard deviation / mean of the gaps between consecutive arrivals
  (1 for Poisson, above 1 bursty, 0 clockwork);
- length quantiles: numpy's default (linear) quantiles of the prompt and output tokens;
- prefix sharing: a request's shared tokens are the leading tokens of its prompt that an
  earlier request's prompt began with too, counted in whole blocks of `block` tokens and at most
  the prompt less one token (a server's prefix cache recomputes the last token). The request
  share is the fraction of requests with any; the token share, shared tokens over all prompt
  tokens, is the hit rate a prefix cache that never evicts would report.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

QUANTILES = (0.1, 0.5, 0.9, 0.99)


@dataclass(frozen=True)
class TrafficStats:
    requests: int
    span_s: float
    mean_rate: float
    interarrival_cv: float
    prompt_tokens: dict[str, float]  # mean, p10, p50, p90, p99, max
    output_tokens: dict[str, float]
    shared_request_share: float  # NaN: nothing known of the prompts' prefixes
    shared_token_share: float
    peak_to_mean: float  # the busiest bin's rate over the mean rate
    rate_bins: tuple[tuple[float, float], ...] = field(default=(), repr=False)  # (bin start s, requests/s)

    def rows(self) -> list[tuple[str, float]]:
        """(statistic, value) in the order the tables show them."""
        out = [
            ("requests", float(self.requests)),
            ("mean rate (req/s)", self.mean_rate),
            ("inter-arrival CV", self.interarrival_cv),
            ("peak / mean rate", self.peak_to_mean),
        ]
        for name, q in (("prompt", self.prompt_tokens), ("output", self.output_tokens)):
            out += [(f"{name} tokens {k}", v) for k, v in q.items()]
        out += [
            ("requests sharing a prefix", self.shared_request_share),
            ("prompt tokens shared", self.shared_token_share),
        ]
        return out


def interarrival_cv(times: np.ndarray) -> float:
    gaps = np.diff(np.sort(np.asarray(times, dtype=float)))
    if len(gaps) < 2 or gaps.mean() <= 0:
        return float("nan")
    return float(gaps.std() / gaps.mean())


def mean_rate(times: np.ndarray) -> float:
    t = np.asarray(times, dtype=float)
    if len(t) < 2 or t.max() <= t.min():
        return float("nan")
    return float((len(t) - 1) / (t.max() - t.min()))


def length_quantiles(lengths: np.ndarray) -> dict[str, float]:
    x = np.asarray(lengths, dtype=float)
    if not len(x):
        return {}
    out = {"mean": float(x.mean())}
    out.update({f"p{round(q * 100)}": float(np.quantile(x, q)) for q in QUANTILES})
    out["max"] = float(x.max())
    return out


def rate_over_time(times: np.ndarray, bin_s: float | None = None, bins: int = 48) -> tuple[tuple[float, float], ...]:
    """(bin start, requests/s in the bin) over the span of `times`; `bin_s` default: span / bins."""
    t = np.asarray(times, dtype=float)
    if len(t) < 2:
        return ()
    t0, span = t.min(), t.max() - t.min()
    width = bin_s or (span / bins if span > 0 else 1.0)
    count = max(1, int(np.ceil(span / width)) if span > 0 else 1)
    hist, edges = np.histogram(t - t0, bins=count, range=(0, count * width))
    return tuple((float(e), float(c) / width) for e, c in zip(edges[:-1], hist))


def _chain_keys(segments: Sequence[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """Keys naming each leading part of a prompt (segment 1, segments 1-2, ...) and where each ends."""
    keys, ends, h, end = [], [], 0, 0
    for key, tokens in segments:
        h = hash((h, key, tokens))
        end += tokens
        keys.append(h)
        ends.append(end)
    return keys, ends


def shared_tokens_from_segments(
    segments: Sequence[Sequence[tuple[int, int]]], prompt_tokens: np.ndarray, block: int = 1, reserve: int = 1
) -> np.ndarray:
    """Per request, its shared leading tokens (module docstring), from the trace's segment chains.

    A request sends of its chain what fits before its last `reserve` tokens (`prompts`
    keeps them its own), so a later request shares a segment only as far as an earlier one sent it."""
    sent: dict[int, int] = {}  # chain key -> the furthest token of that part any request sent
    out = np.zeros(len(prompt_tokens), dtype=np.int64)
    for i, (segs, p) in enumerate(zip(segments, prompt_tokens)):
        keys, ends = _chain_keys(segs)
        limit = max(0, int(p) - reserve)
        shared, matching, begin = 0, True, 0
        for key, end in zip(keys, ends):
            if begin >= limit:
                break
            reach = min(end, limit)
            if matching and key in sent:
                shared = min(sent[key], reach)
                matching = sent[key] >= end
            else:
                matching = False
            sent[key] = max(sent.get(key, 0), reach)
            begin = end
        out[i] = _usable(shared, int(p), block)
    return out


def shared_tokens_from_ids(prompts: Iterable[Sequence[int]], block: int = 16) -> np.ndarray:
    """Per request, its shared leading tokens, from the token ids actually sent."""
    seen: set[int] = set()
    out = []
    for ids in prompts:
        ids = tuple(int(i) for i in ids)
        h, shared, matching = 0, 0, True
        for k in range(0, len(ids) - len(ids) % block, block):
            h = hash((h, ids[k : k + block]))
            if matching and h in seen:
                shared = k + block
            else:
                matching = False
            seen.add(h)
        out.append(_usable(shared, len(ids), block))
    return np.asarray(out, dtype=np.int64)


def _usable(shared: int, prompt: int, block: int) -> int:
    return (min(shared, prompt - 1) // block) * block


def traffic_stats(
    times: np.ndarray,
    prompt_tokens: np.ndarray,
    output_tokens: np.ndarray,
    shared_tokens: np.ndarray | None = None,
    bins: int = 48,
) -> TrafficStats:
    """The statistics of one stream of requests; `shared_tokens` per request (None: unknown)."""
    t = np.asarray(times, dtype=float)
    prompt = np.asarray(prompt_tokens, dtype=np.int64)
    rate = mean_rate(t)
    binned = rate_over_time(t, bins=bins)
    peak = max((r for _, r in binned), default=float("nan"))
    if shared_tokens is None:
        req_share = tok_share = float("nan")
    else:
        shared = np.asarray(shared_tokens, dtype=np.int64)
        req_share = float(np.mean(shared > 0)) if len(shared) else float("nan")
        tok_share = float(shared.sum() / prompt.sum()) if prompt.sum() else float("nan")
    return TrafficStats(
        requests=len(t),
        span_s=float(t.max() - t.min()) if len(t) else 0.0,
        mean_rate=rate,
        interarrival_cv=interarrival_cv(t),
        prompt_tokens=length_quantiles(prompt),
        output_tokens=length_quantiles(output_tokens),
        shared_request_share=req_share,
        shared_token_share=tok_share,
        peak_to_mean=float(peak) / float(np.mean([r for _, r in binned])) if binned else float("nan"),
        rate_bins=binned,
    )
