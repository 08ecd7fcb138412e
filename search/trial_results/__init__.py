"""A trial's results, typed, and the one place they become a stored row and are read back.

What one server start brings back is a `TrialOutcome`: its load stages
(`objectives.stages.StageResult`), the capacity estimate (`objectives.capacity.CapacityEstimate`),
the starts lost to a transient failure (`RetriedStart`), where the seconds went (`Timings`) and
the failure (`serving.Failure`). The study scores it and diagnoses it
(`objectives.diagnosis.Diagnosis`). These stay typed until storage takes them:

* write: `trial_record`, `duplicate_record` and `confirmation_record` build the rows
  (`storage.tables.TrialRecord`, `ConfirmationRun`), the typed results turned into their JSON
  columns here and nowhere else;
* read: `capacity_of`, `stages_of`, `retried_of`, `timings_of`, `failure_of` and `diagnosis_of`
  turn a stored row's columns back into the same types, for the study (confirmation, verdict)
  and the outputs alike.

The types are in `outcome`, the conversions in `rows`; import both from here.

Why here, in `search`, and not in `storage`: storage imports none of the packages whose types
these are (objectives, serving), so a typed shape in storage would be a second copy of each,
filled field by field by its producers. Here the producers' own types are stored as they are,
and every JSON key of a result column is written in `rows` only. `TrialOutcome` lives here
rather than in `search.executor` (which re-exports it) because the outputs read these types
back and may not import the executor.
"""

from search.trial_results.outcome import (
    Neighbour,
    Placement,
    PlannedTrial,
    RetriedStart,
    ServerReuse,
    Timings,
    TrialOutcome,
)
from search.trial_results.rows import (
    capacity_json,
    capacity_of,
    confirmation_record,
    diagnosis_of,
    duplicate_record,
    failure_of,
    retried_of,
    stage_columns,
    stages_of,
    timings_of,
    trial_record,
)

__all__ = [
    "Neighbour",
    "Placement",
    "PlannedTrial",
    "RetriedStart",
    "ServerReuse",
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
    "timings_of",
    "trial_record",
]
