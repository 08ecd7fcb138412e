"""A trial's results, typed, and the one place they become a stored row and are read back.

What one server start brings back is a `TrialOutcome`: its load stages
(`objectives.stages.StageResult`), the capacity estimate (`objectives.capacity.CapacityEstimate`),
the starts lost to a transient failure (`RetriedStart`), where the seconds went (`Timings`) and
the failure (`serving.Failure`). The study scores it and diagnoses it
(`objectives.diagnosis.Diagnosis`). These stay typed until storage takes them:

* the types (`result_types`): the outcome and its parts, and what a row takes from its plan and
  its worker (`PlannedTrial`, `Placement`);
* write (`to_row`): `trial_record`, `duplicate_record` and `confirmation_record` build the rows
  (`storage.tables.TrialRecord`, `ConfirmationRun`), the typed results turned into their JSON
  columns there and nowhere else;
* read (`from_row`): `capacity_of`, `stages_of`, `retried_of`, `timings_of`, `failure_of` and
  `diagnosis_of` turn a stored row's columns back into the same types, for the study
  (confirmation, verdict) and the outputs alike.

The types are at the bottom; the write and the read side each import them and not each other. A
result column's JSON keys are written in `to_row` and read back in `from_row`, and nowhere else.

Why here, in `search`, and not in `storage`: storage imports none of the packages whose types
these are (objectives, serving), so a typed shape in storage would be a second copy of each,
filled field by field by its producers. Here the producers' own types are stored as they are,
and every JSON key of a result column is written in this package only. `TrialOutcome` lives here
rather than in `search.executor` (which re-exports it) because the outputs read these types
back and may not import the executor.
"""

from search.trial_results.from_row import (
    StoredRun,
    capacity_of,
    diagnosis_of,
    failure_of,
    retried_of,
    stages_of,
    target_elapsed_s,
    timings_of,
)
from search.trial_results.result_types import (
    Neighbour,
    Placement,
    PlannedTrial,
    RetriedStart,
    ServerReuse,
    Timings,
    TrialOutcome,
)
from search.trial_results.to_row import (
    capacity_json,
    confirmation_record,
    duplicate_record,
    stage_columns,
    trial_record,
)

__all__ = [
    "Neighbour",
    "Placement",
    "PlannedTrial",
    "RetriedStart",
    "ServerReuse",
    "StoredRun",
    "Timings",
    "TrialOutcome",
    "capacity_json",
    "capacity_of",
    "confirmation_record",
    "diagnosis_of",
    "duplicate_record",
    "failure_of",
    "retried_of",
    "stage_columns",
    "stages_of",
    "target_elapsed_s",
    "timings_of",
    "trial_record",
]
