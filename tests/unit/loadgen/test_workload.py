"""Workload models (validation, bounds, sampling) and the deterministic request builder."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
from pydantic import ValidationError

from loadgen.arrivals import ArrivalSpec, UnresolvedRateError
from loadgen.length_dist import LengthDist
from loadgen.prompts import build_requests, requests_digest
from loadgen.workload import WorkloadSpec


def spec(**kw) -> WorkloadSpec:
    data = {"prompt_tokens": 64, "output_tokens": 8, "arrival": {"mode": "poisson", "rate": 5}, "num_requests": 20}
    data.update(kw)
    return WorkloadSpec.model_validate(data)


# -- LengthDist ---------------------------------------------------------------------------------


def test_bare_integer_is_a_fixed_length():
    d = LengthDist.model_validate(128)
    assert (d.dist, d.value) == ("fixed", 128)
    assert d.upper_bound() == 128 == d.lower_bound()


@pytest.mark.parametrize(
    "data, needle",
    [
        ({"dist": "normal", "mean": 100}, "needs mean, std; missing: std"),
        ({"dist": "uniform", "low": 10}, "missing: high"),
        ({"dist": "fixed", "value": 5, "mean": 3}, "not used: mean"),
        ({"dist": "uniform", "low": 10, "high": 5}, "low (10) > high (5)"),
        ({"dist": "fixed", "value": 5, "min": 10, "max": 8}, "max (8) < min (10)"),
    ],
)
def test_length_dist_errors_name_the_problem(data, needle):
    with pytest.raises(ValidationError) as e:
        LengthDist.model_validate(data)
    assert needle in str(e.value)


def test_unknown_dist_lists_allowed_values():
    with pytest.raises(ValidationError) as e:
        LengthDist.model_validate({"dist": "poisson", "value": 3})
    msg = str(e.value)
    assert "dist" in msg and "'fixed'" in msg and "'lognormal'" in msg and "'empirical'" in msg


def test_samples_stay_within_bounds_and_follow_the_distribution():
    rng = np.random.default_rng(0)
    u = LengthDist(dist="uniform", low=10, high=20)
    x = u.sample(rng, 5000)
    assert x.min() == 10 and x.max() == 20
    n = LengthDist(dist="normal", mean=200, std=50, min=150, max=260)
    x = n.sample(rng, 5000)
    assert x.min() >= 150 and x.max() <= 260
    assert n.upper_bound() == 260 and n.lower_bound() == 150
    ln = LengthDist(dist="lognormal", mean=300, std=100)
    x = ln.sample(rng, 20000)
    assert abs(x.mean() - 300) < 6 and abs(x.std() - 100) < 6
    assert x.max() <= ln.upper_bound()


def test_normal_without_bounds_is_clipped_at_five_sigma():
    d = LengthDist(dist="normal", mean=100, std=10)
    assert d.upper_bound() == 150 and d.lower_bound() == 50


def test_empirical_lengths_from_text_and_json(tmp_path):
    (tmp_path / "lens.txt").write_text("length\n10\n20\n# comment\n30\n")
    (tmp_path / "lens.json").write_text(json.dumps({"values": [5, 7]}))
    t = LengthDist(dist="empirical", file=tmp_path / "lens.txt")
    assert set(t.sample(np.random.default_rng(1), 300)) == {10, 20, 30}
    assert t.upper_bound() == 30
    j = LengthDist(dist="empirical", file=tmp_path / "lens.json", max=6)
    assert set(j.sample(np.random.default_rng(1), 100)) == {5, 6}


def test_yaml_paths_resolve_against_the_file(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "lens.txt").write_text("12\n14\n")
    (tmp_path / "wl.yaml").write_text(
        textwrap.dedent("""
        endpoint: completions
        prompt_tokens: {dist: empirical, file: data/lens.txt}
        output_tokens: 4
        arrival: {mode: closed, concurrency: 2}
        num_requests: 5
    """)
    )
    s = WorkloadSpec.from_yaml(tmp_path / "wl.yaml")
    assert s.classes[0].prompt_tokens.file == tmp_path.resolve() / "data" / "lens.txt"
    assert s.longest_request_tokens() == 18


# -- ArrivalSpec --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, needle",
    [
        ({"mode": "closed"}, "mode=closed needs concurrency"),
        ({"mode": "closed", "concurrency": 4, "rate": 2}, "takes concurrency, not rate"),
        ({"mode": "poisson"}, "exactly one of rate, capacity_fraction"),
        ({"mode": "poisson", "rate": 1, "capacity_fraction": 0.5}, "exactly one of rate"),
        ({"mode": "poisson", "rate": 1, "concurrency": 3}, "concurrency applies to mode=closed"),
        ({"mode": "poisson", "rate": 1, "burstiness": 0.5}, "burstiness applies to mode=gamma"),
        ({"mode": "gamma", "rate": 1, "duty": 0.5}, "duty apply to mode=burst"),
        ({"mode": "uniform", "rate": 1}, "'poisson'"),
    ],
)
def test_arrival_validation(data, needle):
    with pytest.raises(ValidationError) as e:
        ArrivalSpec.model_validate(data)
    assert needle in str(e.value)


def test_capacity_fraction_resolves_into_a_rate():
    a = ArrivalSpec(mode="gamma", burstiness=0.5, capacity_fraction=0.75)
    assert not a.is_resolved
    with pytest.raises(UnresolvedRateError, match="capacity_fraction"):
        a.require_resolved()
    r = a.resolve(8.0)
    assert r.rate == 6.0 and r.capacity_fraction is None and r.burstiness == 0.5 and r.is_resolved
    assert ArrivalSpec(mode="poisson", rate=3).resolve(100).rate == 3


def test_burst_mean_rate():
    a = ArrivalSpec(mode="burst", rate=10, peak_multiplier=5, duty=0.25)
    assert a.mean_rate() == pytest.approx(10 * 0.75 + 50 * 0.25)


# -- WorkloadSpec -------------------------------------------------------------------------------


def test_single_class_shorthand():
    s = spec()
    assert [c.name for c in s.classes] == ["default"] and s.class_names == ["default"]
    with pytest.raises(ValidationError, match="not both"):
        spec(classes=[{"name": "a", "prompt_tokens": 5, "output_tokens": 5}])


def test_a_dumped_spec_validates_again():
    s = WorkloadSpec.model_validate(
        {
            "endpoint": "chat",
            "classes": [
                {
                    "name": "a",
                    "prompt_tokens": {"dist": "normal", "mean": 90, "std": 9},
                    "output_tokens": 5,
                    "shared_prefix": {"fraction": 0.2, "tokens": 8},
                }
            ],
            "arrival": {"mode": "gamma", "burstiness": 0.5, "capacity_fraction": 0.6},
            "duration_s": 30,
        }
    )
    assert WorkloadSpec.model_validate_json(s.model_dump_json()) == s
    assert WorkloadSpec.model_validate(s.model_dump()) == s


def test_misspelt_key_is_rejected_by_name():
    with pytest.raises(ValidationError) as e:
        spec(num_request=5)
    assert "num_request" in str(e.value) and "Extra inputs are not permitted" in str(e.value)


def test_workload_needs_a_bound_and_unique_classes():
    with pytest.raises(ValidationError, match="num_requests, duration_s"):
        spec(num_requests=None)
    with pytest.raises(ValidationError, match="repeated: a"):
        WorkloadSpec.model_validate(
            {
                "classes": [
                    {"name": "a", "prompt_tokens": 5, "output_tokens": 5},
                    {"name": "a", "prompt_tokens": 6, "output_tokens": 5},
                ],
                "arrival": {"mode": "closed", "concurrency": 1},
                "num_requests": 3,
            }
        )


def test_class_needs_lengths_unless_sharegpt():
    with pytest.raises(ValidationError, match="needs output_tokens"):
        WorkloadSpec.model_validate(
            {"prompt_tokens": 5, "arrival": {"mode": "closed", "concurrency": 1}, "num_requests": 1}
        )


def test_shared_prefix_must_fit_in_the_prompt():
    with pytest.raises(ValidationError, match=r"must exceed shared_prefix\.tokens"):
        spec(prompt_tokens={"dist": "uniform", "low": 50, "high": 100}, shared_prefix={"fraction": 0.5, "tokens": 50})


def test_longest_request_tokens():
    s = WorkloadSpec.model_validate(
        {
            "classes": [
                {
                    "name": "a",
                    "prompt_tokens": {"dist": "uniform", "low": 10, "high": 300},
                    "output_tokens": {"dist": "normal", "mean": 50, "std": 10},
                },
                {"name": "b", "prompt_tokens": 100, "output_tokens": 400},
            ],
            "arrival": {"mode": "closed", "concurrency": 1},
            "num_requests": 3,
        }
    )
    assert s.longest_request_tokens() == max(300 + 100, 100 + 400)


def test_sharegpt_longest_request_uses_the_vllm_filters(tmp_path):
    f = tmp_path / "sg.json"
    f.write_text("[]")
    s = spec(prompt_tokens=None, output_tokens=None, sharegpt=str(f))
    assert s.longest_request_tokens() == 2048


# -- request builder ----------------------------------------------------------------------------


def test_completions_prompts_have_exact_lengths_and_vllm_shaped_bodies(tok):
    s = spec(
        prompt_tokens={"dist": "uniform", "low": 5, "high": 300},
        output_tokens={"dist": "uniform", "low": 1, "high": 40},
        num_requests=200,
    )
    reqs = build_requests(s, tok)
    assert len(reqs) == 200
    for r in reqs:
        assert len(r.prompt_ids) == r.prompt_tokens == r.target_prompt_tokens
        assert not set(r.prompt_ids) & tok.special_ids
    body = reqs[0].body("m", 0.0)
    assert body["prompt"] == list(reqs[0].prompt_ids) and body["max_tokens"] == reqs[0].output_tokens
    assert body["ignore_eos"] is True and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True} and body["temperature"] == 0.0
    assert "temperature" not in reqs[0].body("m", None)


def test_chat_prompts_hit_the_exact_templated_length(tok):
    # 80: above what the template and a 20-token system prefix alone take
    s = spec(
        endpoint="chat",
        prompt_tokens={"dist": "uniform", "low": 80, "high": 400},
        shared_prefix={"fraction": 0.5, "tokens": 20, "count": 2},
        num_requests=150,
    )
    reqs = build_requests(s, tok)
    exact = sum(r.prompt_tokens == r.target_prompt_tokens for r in reqs)
    assert exact == len(reqs)
    for r in reqs[:20]:
        assert tok.count_chat([dict(m) for m in r.messages]) == r.prompt_tokens
        assert "max_completion_tokens" in r.body("m", 0.0)
        assert all(c.isprintable() or c in " \n" for m in r.messages for c in m["content"])


def test_same_seed_same_requests_different_seed_different(tok):
    s = spec(endpoint="chat", num_requests=30)
    assert requests_digest(build_requests(s, tok)) == requests_digest(build_requests(s, tok))
    assert requests_digest(build_requests(spec(endpoint="chat", num_requests=30, seed=1), tok)) != requests_digest(
        build_requests(s, tok)
    )


def test_request_i_does_not_depend_on_how_many_are_built(tok):
    s = spec(prompt_tokens={"dist": "uniform", "low": 5, "high": 50})
    few, many = build_requests(s, tok, 5), build_requests(s, tok, 15)
    assert few == many[:5]
    assert build_requests(s, tok, 10, start=5) == many[5:]


def test_warmup_requests_come_from_another_stream(tok):
    s = spec(warmup_requests=5, prompt_tokens={"dist": "uniform", "low": 5, "high": 50})
    warm, measured = build_requests(s, tok, warmup=True), build_requests(s, tok)
    assert len(warm) == 5
    assert {r.prompt_ids for r in warm}.isdisjoint({r.prompt_ids for r in measured})


def test_class_weights_and_shared_prefix_share(tok):
    s = WorkloadSpec.model_validate(
        {
            "classes": [
                {
                    "name": "short",
                    "weight": 3,
                    "prompt_tokens": 40,
                    "output_tokens": 4,
                    "shared_prefix": {"fraction": 0.5, "tokens": 16, "count": 3},
                },
                {"name": "long", "weight": 1, "prompt_tokens": 200, "output_tokens": 4},
            ],
            "arrival": {"mode": "closed", "concurrency": 1},
            "num_requests": 2000,
        }
    )
    reqs = build_requests(s, tok)
    short = [r for r in reqs if r.class_name == "short"]
    assert 0.72 < len(short) / len(reqs) < 0.78
    assert all(r.prompt_tokens == 200 for r in reqs if r.class_name == "long")
    with_prefix = [r for r in short if r.prefix_id is not None]
    assert 0.45 < len(with_prefix) / len(short) < 0.55
    heads = {r.prefix_id: r.prompt_ids[:16] for r in with_prefix}
    assert sorted(heads) == [0, 1, 2]
    assert all(r.prompt_ids[:16] == heads[r.prefix_id] for r in with_prefix)
    assert len(set(heads.values())) == 3


def test_sharegpt_prompts_and_reference_output_lengths(tok, tmp_path):
    convs = [
        {
            "conversations": [
                {"from": "human", "value": f"question {i} " + "bada kole " * (3 + i)},
                {"from": "gpt", "value": "sure " * (5 + i)},
            ]
        }
        for i in range(10)
    ]
    convs.append({"conversations": [{"from": "gpt", "value": "no human turn"}]})
    f = tmp_path / "sg.jsonl"
    f.write_text("\n".join(json.dumps(c) for c in convs))
    s = spec(prompt_tokens=None, output_tokens=None, sharegpt=str(f), num_requests=25)
    reqs = build_requests(s, tok)
    texts = {tok.decode(r.prompt_ids) for r in reqs}
    assert all(t.startswith("question ") for t in texts) and len(texts) == 10  # cycles through the file
    for r in reqs:
        i = int(tok.decode(r.prompt_ids).split()[1])
        assert r.output_tokens == len(tok.encode("sure " * (5 + i)))
