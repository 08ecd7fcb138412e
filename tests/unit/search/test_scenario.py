"""Scenario files: the built-in four are valid; bad files fail with file, field and allowed values."""

import re
import textwrap

import pytest

from loadgen.metrics import GoodputSLO
from objectives.scoring import SLOSpec
from search import calibration, scenario
from search.scenario import CONFIG_DIR, ScenarioError

BUILT_IN = ["online_chat", "api_service", "batch_processing", "mixed", "chat_sessions"]

GOOD = """
name: mine
title: my scenario
workload:
  endpoint: completions
  num_requests: 10
  arrival: {mode: poisson, capacity_fraction: 0.5}
  prompt_tokens: 100
  output_tokens: 10
objectives:
  - {metric: ttft_p95_ms, direction: minimize}
slos:
  - {metric: ttft_p95_ms, max: {x_unloaded: 4}}
  - {metric: error_rate, max: 0.01}
search_space:
  max_num_seqs: {low: 4, high: 64, log: true}
"""


def write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


@pytest.mark.parametrize("name", BUILT_IN)
def test_built_in_scenarios_load(name):
    sc, _source, shown = scenario.load(name)
    assert sc.name == name and shown == f"configs/{name}.yaml"
    assert "vllm_defaults" in sc.baselines and "seed_recommended" in sc.baselines
    assert {"max_num_seqs", "max_num_batched_tokens", "memory_utilization", "scheduler_delay_factor"} <= set(
        sc.search_space
    )
    assert sc.workload.longest_request_tokens() > 0


def test_own_scenario_file_by_path(tmp_path):
    sc, _, shown = scenario.load(write(tmp_path, GOOD))
    assert sc.name == "mine" and shown.endswith("s.yaml")
    assert sc.needs_calibration()


@pytest.mark.parametrize(
    "edit, expected",
    [
        (
            ("endpoint: completions", "endpoint: grpc"),
            r"workload.endpoint: Input should be 'chat' or 'completions' \(got 'grpc'\)",
        ),
        (("direction: minimize", "direction: lower"), r"objectives.0.direction: .*'minimize' or 'maximize'"),
        (
            ("max_num_seqs: {low", "max_seqs: {low"),
            r"search_space: unknown parameter\(s\) max_seqs; tunable parameters: scheduler_delay_factor, max_num_seqs",
        ),
        (
            ("metric: error_rate", "metric: error_ratio"),
            r"\n  slos.1.metric: unknown metric name\(s\): error_ratio. Allowed: .*error_rate",
        ),
        (
            ("{metric: ttft_p95_ms, direction", "{metric: ttft_p95, direction"),
            r"\n  objectives.0.metric: unknown metric name\(s\): ttft_p95\. Allowed",
        ),
        (("title: my scenario\n", "title: my scenario\ncolour: red\n"), r"colour: unknown field"),
        (
            ("{metric: error_rate, max: 0.01}", "{metric: error_rate, max: {x_unloaded: 2}}"),
            r"x_unloaded applies to latency metrics",
        ),
        (
            ("{metric: ttft_p95_ms, max: {x_unloaded: 4}}", "{metric: ttft_p95_ms, max: {x_unloaded: 4, of: long}}"),
            r"slos.0.max.of: 'long' is not a request class of the workload; classes: default",
        ),
        # the scoring's own rules, checked when the file is read rather than when the study scores
        (
            ("{metric: error_rate, max: 0.01}", "{metric: error_rate, max: 0}"),
            r"slos.1: SLO on error_rate: the bound must be non-zero",
        ),
        (
            ("{metric: error_rate, max: 0.01}", "{metric: error_rate, max: 0.01, min: 0.001}"),
            r"slos.1: SLO on error_rate: give exactly one of max, min",
        ),
        (("high: 64", "high: 2"), r"search_space.max_num_seqs: .*low \(4.0\) is greater than high \(2.0\)"),
        (
            ("max_num_seqs: {low: 4, high: 64, log: true}", "memory_utilization: {low: 0.1, high: {x_default: 1}}"),
            r"search_space.memory_utilization: x_default applies to the parameters whose default vLLM picks by "
            r"the machine \(max_num_batched_tokens, max_num_seqs\); give low/high as numbers",
        ),
        (
            ("low: 4, high: 64", "low: {x_default: 2}, high: {x_default: 1}"),
            r"search_space.max_num_seqs: .*low \(2.0x vLLM's default\) is greater than high \(1.0x vLLM's default\)",
        ),
        (
            ("title: my scenario\n", "title: my scenario\ncost: {usd_per_hour: 0}\n"),
            r"cost.usd_per_hour: Input should be greater than 0",
        ),
        (("title: my scenario\n", "title: my scenario\ncost: {usd_per_hour: .inf}\n"), r"cost.usd_per_hour: .*finite"),
        (("title: my scenario\n", "title: my scenario\ncost: {usd: 3}\n"), r"cost.usd: unknown field"),
    ],
)
def test_bad_scenario_names_file_field_and_allowed(tmp_path, edit, expected):
    path = write(tmp_path, GOOD.replace(*edit), "bad.yaml")
    with pytest.raises(ScenarioError, match=expected) as err:
        scenario.load(path)
    assert str(err.value).startswith(f"{path}: invalid scenario")


NUMBER_OR_X_DEFAULT = (
    r"a number, or \{x_default: k\} with k > 0 \(k times vLLM's default for the parameter on the machine\)"
)
NUMBER_OR_X_UNLOADED = (
    r"a number, or \{x_unloaded: k\} with k > 0 \(k times an unloaded median; `of: <class>` names its class\)"
)


@pytest.mark.parametrize(
    "edit, field, allowed, got",
    [
        (
            ("high: 64", "high: {x_default: 0}"),
            "search_space.max_num_seqs.high",
            NUMBER_OR_X_DEFAULT,
            "{'x_default': 0}",
        ),
        (
            ("low: 4", "low: {x_defualt: 0.5}"),
            "search_space.max_num_seqs.low",
            NUMBER_OR_X_DEFAULT,
            "{'x_defualt': 0.5}",
        ),
        (("low: 4", "low: {x_default: 0.5, of: long}"), "search_space.max_num_seqs.low", NUMBER_OR_X_DEFAULT, ".*"),
        (("low: 4", "low: four"), "search_space.max_num_seqs.low", NUMBER_OR_X_DEFAULT, "'four'"),
        (("low: 4", "low: true"), "search_space.max_num_seqs.low", NUMBER_OR_X_DEFAULT, "True"),  # not the number 1
        (("max: {x_unloaded: 4}", "max: {x_unloaded: -4}"), "slos.0.max", NUMBER_OR_X_UNLOADED, "{'x_unloaded': -4}"),
        (("max: {x_unloaded: 4}", "max: {x_unloded: 4}"), "slos.0.max", NUMBER_OR_X_UNLOADED, "{'x_unloded': 4}"),
        (("max: {x_unloaded: 4}", "max: [4]"), "slos.0.max", NUMBER_OR_X_UNLOADED, r"\[4\]"),
        (
            ("title: my scenario\n", "title: my scenario\ngoodput: {ttft_ms: {x_unloaded: 0}}\n"),
            "goodput.ttft_ms",
            NUMBER_OR_X_UNLOADED,
            "{'x_unloaded': 0}",
        ),
    ],
)
def test_bad_number_or_multiple_is_one_error_naming_both_forms(tmp_path, edit, field, allowed, got):
    """A bound that is a number or a mapping: one error naming both forms and what was given, not
    pydantic's one per form ("Input should be a valid number", then the mapping's complaint)."""
    path = write(tmp_path, GOOD.replace(*edit), "bad.yaml")
    with pytest.raises(ScenarioError) as err:
        scenario.load(path)
    header, *errors = str(err.value).splitlines()
    assert header == f"{path}: invalid scenario"
    assert len(errors) == 1, errors
    assert re.fullmatch(rf"  {re.escape(field)}: {allowed}; got {got}", errors[0]), errors[0]


OWNED = r"cannot be set from a scenario .*; the tuner owns host, port, uds, model, trust_remote_code, config"


@pytest.mark.parametrize(
    "added, expected",
    [
        (
            "server:\n  fixed: {host: 0.0.0.0}\n",
            r"server.fixed: 'host' cannot be set from a scenario \(every server binds to 127.0.0.1\)",
        ),
        ("server:\n  fixed: {trust_remote_code: true}\n", r"server.fixed: 'trust_remote_code' " + OWNED),
        ("server:\n  fixed: {port: 8000}\n", r"server.fixed: 'port' " + OWNED),
        (
            "baselines:\n  open: {max_num_seqs: 8, trust-remote-code: true}\n",
            r"baselines: open: 'trust-remote-code' " + OWNED,
        ),
        ("baselines:\n  other: {config: /etc/vllm.yaml}\n", r"baselines: other: 'config' " + OWNED),
    ],
)
def test_a_scenario_cannot_set_what_the_tuner_owns(tmp_path, added, expected):
    # vLLM's parser lets the last flag win and these come after --host 127.0.0.1 --port N: refused.
    path = write(tmp_path, GOOD + added, "bad.yaml")
    with pytest.raises(ScenarioError, match=expected) as err:
        scenario.load(path)
    assert str(err.value).startswith(f"{path}: invalid scenario")


@pytest.mark.parametrize("name", ["..", ".hidden", "-x", "a/b"])
def test_a_scenario_name_stays_one_directory_under_runs(tmp_path, name):
    path = write(tmp_path, GOOD.replace("name: mine", f"name: '{name}'"), "bad.yaml")
    with pytest.raises(ScenarioError, match=r"name: use letters, digits"):
        scenario.load(path)


def test_unknown_scenario_lists_the_built_in_ones():
    with pytest.raises(
        ScenarioError, match="built-in scenarios: api_service, batch_processing, chat_sessions, mixed, online_chat"
    ):
        scenario.load("chat")


def test_not_yaml_is_one_line_saying_where(tmp_path):
    with pytest.raises(ScenarioError) as e:
        scenario.load(write(tmp_path, "name: x\nworkload: [1, 2\n"))
    assert "\n" not in str(e.value)
    assert str(e.value).endswith(
        ": not valid YAML: line 3, column 1: expected ',' or ']', but got '<stream end>' "
        "(while parsing a flow sequence at line 2, column 11)"
    )


def test_relative_numbers_resolve_against_the_calibration():
    sc, _, _ = scenario.load("mixed")
    cal = calibration.CalibrationResult(
        unloaded={
            "ttft_median_ms@short": 50.0,
            "ttft_median_ms@long": 700.0,
            "ttft_median_ms": 80.0,
            "tpot_median_ms": 10.0,
            "tpot_median_ms@short": 9.0,
            "e2el_median_ms": 900.0,
        },
        saturation={"request_throughput": 2.0},
        capacity_rps=2.0,
        seconds=1.0,
    )
    workload, slos, goodput = calibration.resolve(sc, cal)
    assert workload.arrival.rate == pytest.approx(sc.workload.arrival.capacity_fraction * 2.0)
    assert workload.arrival.capacity_fraction is None
    bounds = {s.metric: s.max for s in slos}
    factor = {s.metric: s.max.x_unloaded for s in sc.slos if hasattr(s.max, "x_unloaded")}
    # the short class's TTFT bound multiplies the unloaded median of the class it names (`of:
    # long`, 700), the prefill it waits behind, not its own (50) nor the overall one (80)
    assert bounds["ttft_p95_ms@short"] == pytest.approx(factor["ttft_p95_ms@short"] * 700.0)
    assert bounds["tpot_p95_ms"] == pytest.approx(factor["tpot_p95_ms"] * 10.0)
    assert bounds["error_rate"] == 0.01
    assert goodput.ttft_ms == pytest.approx(8 * 80.0) and goodput.tpot_ms == pytest.approx(8 * 10.0)


def test_repeated_calibration_takes_each_medians_and_keeps_the_rounds_spread():
    rounds = [
        {"capacity_rps": c, "unloaded": {"ttft_median_ms": t}} for c, t in ((3.98, 70.0), (3.56, 90.0), (3.70, 75.0))
    ]
    saturations = [{"request_throughput": r["capacity_rps"], "round": i} for i, r in enumerate(rounds)]
    cal = calibration.CalibrationResult.from_rounds(rounds, saturations, seconds=90.0)
    assert cal.capacity_rps == 3.70 and cal.unloaded == {"ttft_median_ms": 75.0}
    assert cal.saturation["round"] == 2  # the median round's own run
    spread = cal.spread()
    assert (spread.value, spread.low, spread.high, spread.n) == pytest.approx((3.70, 3.56, 3.98, 3))
    assert cal.spread("ttft_median_ms").high == 90.0 and cal.cv() == pytest.approx(0.0566, abs=1e-3)
    again = calibration.CalibrationResult.from_dict(cal.as_dict())
    assert again == cal
    # a study calibrated before repeats existed: one round, no spread
    old = calibration.CalibrationResult.from_dict(
        {"unloaded": {}, "saturation": {}, "capacity_rps": 2.0, "seconds": 1.0}
    )
    assert old.spread() is None


def test_screening_must_be_cheaper_than_the_full_measurement(tmp_path):
    base = (CONFIG_DIR / "mixed.yaml").read_text()
    with pytest.raises(ScenarioError, match=r"screening.duration_s: 900 must be at most workload.duration_s \(600\)"):
        scenario.load(write(tmp_path, base + "\nscreening: {duration_s: 900}\n"))
    with pytest.raises(ScenarioError, match=r"screening.max_stages: 9 must be at most capacity.max_stages \(5\)"):
        scenario.load(write(tmp_path, base + "\nscreening: {max_stages: 9}\n"))
    sc, _, _ = scenario.load(write(tmp_path, base + "\nscreening: {duration_s: 20, max_stages: 2}\n"))
    assert sc.screening.duration_s == 20 and sc.confirmation.runs == 3


def test_unloaded_reference_metric():
    assert scenario.unloaded_reference("ttft_p95_ms@short") == "ttft_median_ms@short"
    assert scenario.unloaded_reference("e2el_p99_ms") == "e2el_median_ms"
    assert scenario.unloaded_reference("goodput") is None


def test_scenario_slos_are_the_scorings_types_and_resolve_to_plain_numbers():
    sc, _, _ = scenario.load("api_service")
    assert all(isinstance(s, SLOSpec) for s in sc.slos) and isinstance(sc.goodput, GoodputSLO)
    cal = calibration.CalibrationResult(
        unloaded={"ttft_median_ms": 80.0, "tpot_median_ms": 10.0, "e2el_median_ms": 900.0},
        saturation={"request_throughput": 2.0},
        capacity_rps=2.0,
        seconds=1.0,
    )
    _, slos, goodput = calibration.resolve(sc, cal)
    assert slos and all(type(s) is SLOSpec and isinstance(s.bound, float) for s in slos)
    assert goodput == GoodputSLO(ttft_ms=10 * 80.0, tpot_ms=8 * 10.0)


def test_every_scenario_bounds_the_error_rate(tmp_path):
    # A scenario that says nothing of failures still holds error_rate <= 1%: failed requests
    # never make a config look fast.
    sc, _, _ = scenario.load(write(tmp_path, GOOD.replace("  - {metric: error_rate, max: 0.01}\n", "")))
    assert [(s.metric, s.max) for s in sc.slos if s.metric == "error_rate"] == [("error_rate", 0.01)]
    own, _, _ = scenario.load(write(tmp_path, GOOD.replace("max: 0.01", "max: 0.05"), "own.yaml"))
    assert [(s.metric, s.max) for s in own.slos if s.metric == "error_rate"] == [("error_rate", 0.05)]


def test_every_shipped_scenario_loads():
    shipped = sorted(CONFIG_DIR.glob("*.yaml"))
    assert shipped and [scenario.load(path)[0].name for path in shipped] == [path.stem for path in shipped]


def test_the_allowed_pass_through_flags_load_and_others_are_refused_as_written(tmp_path):
    allowed = "server:\n  fixed: {kv_cache_dtype: fp8, enforce_eager: false}\nbaselines:\n  b: {quantization: fp8}\n"
    sc, _, _ = scenario.load(write(tmp_path, GOOD + allowed))
    assert sc.server.fixed == {"kv_cache_dtype": "fp8", "enforce_eager": False}
    for added, field in [
        ("server:\n  fixed: {enforce-eager: true}\n", "server.fixed: "),
        ("baselines:\n  b: {chat_template: /tmp/t.jinja}\n", "baselines: b: "),
    ]:
        path = write(tmp_path, GOOD + added, "bad.yaml")
        with pytest.raises(
            ScenarioError,
            match=rf"\n  {field}'(enforce-eager|chat_template)' is neither a tunable "
            r"parameter nor a flag on the allow list",
        ):
            scenario.load(path)


def test_a_scenario_text_is_checked_as_a_file_is_and_named_where_it_is_stored(tmp_path):
    text = GOOD + "server:\n  fixed: {middleware: p.Middleware}\n"
    with pytest.raises(ScenarioError) as err:
        scenario.parse(text, "the scenario stored with study 'mine'", tmp_path)
    assert str(err.value).splitlines() == [
        "the scenario stored with study 'mine': invalid scenario",
        "  server.fixed: 'middleware' is neither a tunable parameter nor a flag on the allow list of flags that shape "
        "serving performance; `autotune params` lists what a scenario may set",
    ]
    assert scenario.parse(GOOD, "stored", tmp_path).name == "mine"


FLAT = GOOD.replace(
    "  - {metric: ttft_p95_ms, direction: minimize}",
    "  - {metric: ttft_p95_ms, direction: minimize}\n  - {metric: output_throughput, direction: maximize}",
)


def test_a_throughput_objective_at_a_fixed_open_loop_rate_is_warned_about(tmp_path):
    sc, _, _ = scenario.load(write(tmp_path, FLAT))
    [line] = scenario.flat_objective_warnings(sc)
    assert line.startswith(
        "objectives.1: output_throughput at a fixed open-loop rate (poisson arrivals) reads the offered load"
    )
    assert "slo_capacity_output_throughput with a capacity: section" in line and "closed loop" in line
    assert "\n" not in line


def test_no_flat_objective_warning_where_the_load_moves_it(tmp_path):
    closed = FLAT.replace("arrival: {mode: poisson, capacity_fraction: 0.5}", "arrival: {mode: closed, concurrency: 8}")
    assert scenario.flat_objective_warnings(scenario.load(write(tmp_path, closed))[0]) == []
    assert scenario.flat_objective_warnings(scenario.load(write(tmp_path, GOOD))[0]) == []
    for name in BUILT_IN:
        assert scenario.flat_objective_warnings(scenario.load(name)[0]) == []


def test_the_flat_objective_warning_is_said_before_the_study_starts(tmp_path):
    from search import prepare
    from tests.support.fakes import ctx as fake_ctx

    opts = prepare.StudyOptions(scenario=str(write(tmp_path, FLAT)), runs_dir=tmp_path / "runs")
    prep = prepare.prepare(opts, fake_ctx())
    assert any(n.startswith("warning: objectives.1: output_throughput") for n in prep.space_notes)


def test_capacity_floor_is_checked_and_stages_sized_in_seconds_are_refused(tmp_path):
    base = GOOD.replace("objectives:", "capacity: {floor_fraction: %s}\nobjectives:")
    with pytest.raises(ScenarioError, match=r"capacity.floor_fraction: Input should be less than 1"):
        scenario.load(write(tmp_path, base % 1.5))
    spec = scenario.load(write(tmp_path, base % 0.25))[0].capacity
    assert spec.floor(2.0) == 0.5 and spec.floor(2.0, cap_s=10) == 1.0  # 10 requests in the 10 s cap
    for old in ("stage_s: 15", "max_stage_s: 60"):
        with pytest.raises(ScenarioError, match=rf"capacity: {old.split(':')[0]}: stages are sized in requests"):
            scenario.load(write(tmp_path, GOOD.replace("objectives:", f"capacity: {{{old}}}\nobjectives:")))
