"""The search phase's measurement is marked as a screen (its capacity search may stop a trial
that cannot matter); the confirmation's full one is not, with or without a `screening:` section."""

from loadgen.workload import WorkloadSpec
from objectives.stages import CapacitySpec
from search.executor import Measurement
from search.scenario import Screening

WL = WorkloadSpec.model_validate(
    {"prompt_tokens": 8, "output_tokens": 4, "duration_s": 45, "arrival": {"mode": "poisson", "rate": 2.0}}
)


def test_only_the_search_phase_screens():
    full = Measurement(WL, capacity=CapacitySpec(stage_s=15, max_stages=5))
    assert not full.screen
    assert full.screened(None).screen and full.screened(None).workload == full.workload
    assert full.screened(Screening(max_stages=3)).screen


def test_the_planned_load_time_counts_lengthened_stages():
    full = Measurement(WL, capacity=CapacitySpec(stage_s=15, max_stages=5, floor_fraction=0.25))
    assert full.planned_s() == 45 + 5 * 60
