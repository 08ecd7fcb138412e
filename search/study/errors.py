"""Why a study will not run, or cannot go on: what the CLI turns into one line and an exit code."""


class StudyBusy(RuntimeError):
    """Another process runs the study (SQLite takes one tuner per study)."""


class StudyMismatch(ValueError):
    """A resume where the trials already stored were measured on something else."""


class StudyStopped(RuntimeError):
    """The study cannot go on for a reason outside the configurations (a calibration that failed
    or measured nothing, the load generator failing every trial); what is stored stays stored."""


class DatabaseUnreachable(StudyStopped):
    """The database stayed away longer than the study waits for it (`--db-outage-s`); what was
    measured meanwhile is kept in the run directory's spool and stored by the next run."""
