"""The study's plotly figures, shared by the HTML report and the optuna-dashboard: the Pareto
front and its hypervolume (`front`), parameter importances (`importance`), every trial against
the parameters, its bottleneck and the table of all trials (`trials`), latency against rate
(`stages`) and the confirmation runs (`confirmation`); `style` says what marks and colours mean.

Colours and symbols mean the same everywhere: green circles met every SLO, orange triangles
violated one, red crosses never served (drawn at the worst edge of the axes, since they have
no measured value), open diamonds are baselines, the gold star is the chosen configuration.
The latency-against-rate figure colours by trial instead; its subtitle says what its marks mean.
The confirmation figure colours each re-measurement by its round.
"""

from app.outputs.figures.confirmation_figure import confirmation_figure
from app.outputs.figures.front import hypervolume_figure, pareto_figure
from app.outputs.figures.importance import importance_figure, measured_study
from app.outputs.figures.stages import latency_rate_figure
from app.outputs.figures.trials_figure import bottleneck_figure, objective_param_figure, trials_table_figure

__all__ = [
    "bottleneck_figure",
    "confirmation_figure",
    "hypervolume_figure",
    "importance_figure",
    "latency_rate_figure",
    "measured_study",
    "objective_param_figure",
    "pareto_figure",
    "trials_table_figure",
]
