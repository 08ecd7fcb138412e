"""Parameter importances per objective (PED-ANOVA), computed on the measured trials only."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import optuna
import plotly.graph_objects as go

from app.outputs.trial_views import TrialView


def measured_study(study: optuna.Study, views: list[TrialView]) -> optuna.Study:
    """An in-memory copy with measured trials only: failed trials carry penalty values that
    would dominate any importance or slice."""
    keep = {v.number for v in views if v.values}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    copy = optuna.create_study(directions=study.directions)
    copy.add_trials(
        [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)) if t.number in keep]
    )
    return copy


def _signed(k: int, sign: float) -> Callable[[optuna.trial.FrozenTrial], float]:
    """The importances' target: objective `k` of a trial, times `sign`."""
    return lambda t: sign * t.values[k]


def importance_figure(
    study: optuna.Study, views: list[TrialView], names: Sequence[str], directions: Sequence[str]
) -> tuple[go.Figure | None, str]:
    """Parameter importances per objective (Optuna 5's default PED-ANOVA), or why there are none."""
    measured = measured_study(study, views)
    n = len(measured.trials)
    params = sorted({p for t in measured.trials for p in t.params})
    if n < 3 or not params:
        return None, f"Parameter importances need at least 3 measured trials with sampled parameters ({n} here)."
    fig = go.Figure()
    notes = []
    for k, name in enumerate(names):
        sign = 1.0 if directions[k] == "minimize" else -1.0  # PED-ANOVA explains *low* targets
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                imp = optuna.importance.get_param_importances(measured, target=_signed(k, sign))
            except Exception as e:
                notes.append(f"{name}: {e}")
                continue
        if any("less than 2 trials" in str(w.message) for w in caught):
            notes.append(f"{name}: some parameter ranges hold fewer than 2 trials, so the importances are rough")
        fig.add_trace(go.Bar(x=[imp.get(p, 0.0) for p in params], y=params, orientation="h", name=name))
    if not fig.data:
        return None, "Parameter importances could not be computed: " + "; ".join(notes)
    fig.update_layout(
        title=f"Parameter importances per objective ({n} measured trials, PED-ANOVA)",
        xaxis_title="importance (share)",
        barmode="group",
        height=120 + 60 * len(params),
    )
    return fig, "; ".join(notes)
