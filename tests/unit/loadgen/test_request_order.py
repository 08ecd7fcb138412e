"""The representative request order: every window holds the scenario's class mix, lengths spread
over each class's quantiles, and request i is the same whatever builds it."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from loadgen.class_order import ClassOrder, unit_points, window_bound
from loadgen.prompts import plan_requests
from loadgen.workload import WorkloadSpec


def workload(weights: list[float], seed: int, **kw) -> WorkloadSpec:
    classes = [
        {"name": f"c{i}", "weight": w, "prompt_tokens": {"dist": "uniform", "low": 20, "high": 400}, "output_tokens": 8}
        for i, w in enumerate(weights)
    ]
    return WorkloadSpec.model_validate(
        {"classes": classes, "arrival": {"mode": "poisson", "rate": 2}, "num_requests": 10, "seed": seed, **kw}
    )


def worst_window(classes: list[str], names: list[str], weights: list[float], lengths: range) -> float:
    """The largest |count of a class in a window - its weight x the window's length|."""
    shares = np.asarray(weights) / sum(weights)
    onehot = np.array([[c == n for n in names] for c in classes], dtype=float)
    before = np.vstack([np.zeros(len(names)), np.cumsum(onehot, axis=0)])
    return max(float(np.abs(before[n:] - before[:-n] - shares * n).max()) for n in lengths)


def realised_classes(tok, weights: list[float], seed: int, n: int = 600, start: int = 0) -> list[str]:
    spec = workload(weights, seed)
    return [p.class_name for p in plan_requests(spec, tok, n, start=start)]


@pytest.mark.parametrize("weights", [[0.7, 0.3], [0.9, 0.1], [0.55, 0.45]])
def test_two_class_windows_hold_their_mix_within_one_request(tok, weights):
    """Windows of every length from 5 to 200, 50 seeds: each class's count is within one request
    of its weight times the window (independent draws: 19 `short` in a row for mixed's seed)."""
    names = ["c0", "c1"]
    for seed in range(50):
        classes = realised_classes(tok, weights, seed, n=400)
        assert worst_window(classes, names, weights, range(5, 201)) < 1.0, seed


@pytest.mark.parametrize("weights", [[0.5, 0.3, 0.2], [0.6, 0.3, 0.1], [0.7, 0.2, 0.1]])
def test_three_class_windows_hold_usual_weights_within_one_request(tok, weights):
    names = ["c0", "c1", "c2"]
    for seed in range(50):
        classes = realised_classes(tok, weights, seed, n=400)
        assert worst_window(classes, names, weights, range(5, 201)) <= 1.0 + 1e-9, seed


def test_three_and_four_classes_any_weights_stay_within_the_order_bound():
    """Tijdeman's bound: every window within 2 - 1/(k-1) requests of its share (1.5 for three
    classes), whatever the weights and seed."""
    rng = np.random.default_rng(7)
    for k in (3, 4):
        for seed in range(25):
            weights = np.maximum(rng.dirichlet([1.0] * k), 0.02)
            # mostly weights of three decimals, as a scenario writes them; two of full precision,
            # read as shares of 1/100000 (the order's longest period)
            weights = list(weights if seed < 2 else np.round(weights / weights.sum(), 3))
            order = ClassOrder(tuple(weights), seed)
            classes = [f"c{order.class_of(i)}" for i in range(500)]
            worst = worst_window(classes, [f"c{c}" for c in range(k)], weights, range(5, 201))
            assert worst < window_bound(k) + 200 / 100_000, (k, seed, weights)


def test_no_order_holds_three_arbitrary_weights_within_one_request():
    """Why the bound above is not one request for three classes: for weights 0.15/0.05/0.80 an
    exhaustive search finds no sequence of even 18 requests whose every window is within one."""
    weights = [Fraction(3, 20), Fraction(1, 20), Fraction(16, 20)]

    def extend(before: list[list[int]]) -> int:
        """The longest valid sequence starting with the one whose class counts are `before`."""
        m, best = len(before) - 1, len(before) - 1
        if m >= 18:
            return m
        for c in range(3):
            nxt = list(before[m])
            nxt[c] += 1
            if all(abs(nxt[x] - before[m + 1 - n][x] - weights[x] * n) <= 1 for n in range(1, m + 2) for x in range(3)):
                best = max(best, extend([*before, nxt]))
        return best

    assert extend([[0, 0, 0]]) == 17


def test_stage_slices_hold_the_mix_too(tok):
    """A load stage's slice far along the sequence is as representative as its start."""
    weights, names = [0.7, 0.3], ["c0", "c1"]
    classes = realised_classes(tok, weights, 20261122, n=300, start=3 << 20)
    assert worst_window(classes, names, weights, range(5, 201)) < 1.0


def test_mixed_seed_no_longer_opens_with_a_run_of_short_requests(tok):
    """The seed behind the 19 short requests in a row: its first 16 now hold 11 or 12 short ones."""
    classes = realised_classes(tok, [0.7, 0.3], 20261122, n=16)
    assert classes.count("c1") in (4, 5)


def test_lengths_within_a_class_reach_its_tails_in_every_short_window():
    """The class's j-th request takes the j-th point of a Kronecker sequence: any 10 consecutive
    requests of a class hold one in its lowest and one in its highest 20% of lengths (independent
    draws miss one in about 20% of such windows)."""
    for seed in range(50):
        u = unit_points(seed, 0, 0, np.arange(2000))
        for dim in range(u.shape[1]):
            windows = np.lib.stride_tricks.sliding_window_view(u[:, dim], 10)
            assert (windows.min(axis=1) < 0.2).all() and (windows.max(axis=1) > 0.8).all(), (seed, dim)


def test_request_i_is_the_same_whatever_range_builds_it(tok):
    """Common random numbers: stage k of every trial sends the same requests, and a longer stage
    sends a shorter one's and then more."""
    spec = workload([0.7, 0.3], 5, endpoint="completions")
    whole = plan_requests(spec, tok, 120)
    part = plan_requests(spec, tok, 40, start=50)
    for a, b in zip(whole[50:90], part):
        assert (a.index, a.class_name, a.target_prompt, a.output_tokens, a.prefix_id) == (
            b.index,
            b.class_name,
            b.target_prompt,
            b.output_tokens,
            b.prefix_id,
        )
        assert (a.pool == b.pool).all()


def test_shared_prefixes_spread_evenly_over_a_class(tok):
    """The prefix carried follows the stratified point too: a 0.6 fraction over 2 prefixes gives
    every window of 20 requests 11-13 with a prefix (independent draws: 6-18), each prefix 4-8
    times (independent draws: 1-12)."""
    spec = WorkloadSpec.model_validate(
        {
            "prompt_tokens": 300,
            "output_tokens": 8,
            "shared_prefix": {"fraction": 0.6, "tokens": 64, "count": 2},
            "arrival": {"mode": "poisson", "rate": 2},
            "num_requests": 10,
            "seed": 3,
            "endpoint": "completions",
        }
    )
    prefix = np.array([-1 if p.prefix_id is None else p.prefix_id for p in plan_requests(spec, tok, 400)])
    for a in range(380):
        window = prefix[a : a + 20]
        assert 11 <= (window >= 0).sum() <= 13
        assert all(4 <= (window == p).sum() <= 8 for p in (0, 1))


def test_a_stages_mix_deviation_is_read_against_the_normalised_weights():
    from loadgen import mix_deviation

    assert mix_deviation({"short": 98, "long": 42}, {"short": 7, "long": 3}) == pytest.approx(0.0)
    assert mix_deviation({"short": 99, "long": 41}, {"short": 0.7, "long": 0.3}) == pytest.approx(1.0)
    assert mix_deviation({"short": 10}, {"short": 0.5, "long": 0.5}) == pytest.approx(5.0)  # a class absent
    assert mix_deviation({}, {}) == 0.0
