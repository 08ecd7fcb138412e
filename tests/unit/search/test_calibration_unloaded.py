"""The unloaded TPOT reference over calibration rounds: a round without a timed class keeps the
others' median, and the verdict's lines say which class was left out (search.calibration).
"""

from __future__ import annotations

from pathlib import Path

from app.outputs import calibration_text
from search import calibration
from search.scenario import parse

SCENARIO = """
name: t
title: t
workload: {endpoint: completions, num_requests: 10, prompt_tokens: 30, output_tokens: 8,
           arrival: {mode: poisson, rate: 1}}
objectives: [{metric: ttft_p95_ms, direction: minimize}]
slos: [{metric: tpot_p95_ms, max: {x_unloaded: 25}}, {metric: error_rate, max: 0.01}]
search_space: {max_num_seqs: {low: 4, high: 64}}
"""


def test_a_round_without_a_timed_class_keeps_the_others_median_and_the_lines_say_why():
    rounds = [
        {"capacity_rps": 2.0, "unloaded": {"tpot_median_ms": v}, "decode_timed_share": {"short": 0.1, "long": 1.0}}
        for v in (4.0, None, 5.0)
    ]
    cal = calibration.CalibrationResult.from_rounds(rounds, [{}, {}, {}], seconds=1.0)
    assert cal.unloaded["tpot_median_ms"] == 4.5 and cal.untimed_classes() == ["short"]
    sc = parse(SCENARIO, "t.yaml", Path("."))
    (line,) = [x for x in calibration_text.calibration_lines(sc, cal) if "tpot" in x]
    assert "without the short class" in line
