"""The calibration in words names, for each relative bound, the unloaded median it multiplies."""

from app.outputs.calibration_text import calibration_lines
from search import scenario
from search.calibration import CalibrationResult


def test_a_bound_anchored_on_another_class_moves_with_that_class_median():
    sc, _, _ = scenario.load("mixed")
    rounds = [
        {
            "capacity_rps": c,
            "unloaded": {"ttft_median_ms@short": s, "ttft_median_ms@long": long_, "tpot_median_ms": 9.0},
        }
        for c, s, long_ in ((1.4, 85.0, 1100.0), (1.5, 86.5, 1152.0), (1.6, 90.0, 1200.0))
    ]
    cal = CalibrationResult.from_rounds(rounds, [{"request_throughput": r["capacity_rps"]} for r in rounds], 1.0)
    lines = calibration_lines(sc, cal)
    long_line = next(x for x in lines if x.startswith("calibration: unloaded ttft_median_ms@long "))
    assert long_line.endswith("the bound ttft_p95_ms@short <= 1.5x moves with it")
    # the short class's own median is no reference of the scenario's: nothing moves with it
    assert not any("ttft_median_ms@short" in x for x in lines)
