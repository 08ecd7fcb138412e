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
    full = Measurement(WL, capacity=CapacitySpec(max_stages=5))
    assert not full.screen
    assert full.screened(None).screen and full.screened(None).workload == full.workload
    assert full.screened(Screening(max_stages=3)).screen


def test_the_planned_load_time_counts_every_stage_at_its_cap_and_the_floor():
    """The most the load part can take: the target stage run on to its cap, then every capacity
    stage at the floor of the search, each held to the workload's time cap."""
    sized = WL.model_copy(update={"num_requests": 20})  # 20 requests a stage, 30 at the cap
    full = Measurement(sized, capacity=CapacitySpec(max_stages=5, floor_fraction=0.25))
    assert full.planned_s() == 30 / 2.0 + 5 * min(45, 30 / 0.5)
    capped = Measurement(sized.model_copy(update={"duration_s": 40}), capacity=CapacitySpec(max_stages=5))
    assert capped.planned_s() == 15 + 5 * 40
