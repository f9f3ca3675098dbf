"""What the dashboard shows, as plain data: studies, trials, points, failures and importance.

Pure functions over the store's records (and Optuna's study, for importance). The Streamlit pages
in `dashboard/` only draw what these return, and tests call them directly. Nothing here writes to
the database, starts a server or imports the launcher: the dashboard is a reader that keeps working
while a study writes. The domain rules (the winner, a trial's best level, what spends the budget, a
configuration's identity) are `tuner.verdict.rules`'; the trials table's shared cells are
`tuner.report.tables.trial_row`.

`source` reads the store, `labels` names columns and cells, `studies` summarizes studies, `trials`
tables trials, `curves` traces each trial's load curve, `points` draws measured points and Pareto
fronts, `choose` ranks configurations across studies by cost (the Choose page), `cards` builds the
best card and a trial's page, `logs` reads a trial's server log (from
its run directory only), `importance` asks Optuna, `predictions` sets predictions beside
measurements. Every public name is re-exported here: `from tuner.report import dashboard_data
as dd` then `dd.trials_frame(...)`.
"""

from tuner.report.dashboard_data.cards import (
    LEVEL_COLUMNS,
    BestCard,
    FailureGroup,
    LaunchView,
    best_card,
    confirmation_text,
    export_files,
    failure_groups,
    launch_view,
    levels_frame,
    price_text,
)
from tuner.report.dashboard_data.choose import (
    CHART_LIMIT,
    CHOICE_COLUMNS,
    GAP,
    HARDWARE,
    Drawn,
    Ranking,
    choice_points,
    drawn_points,
    rank_studies,
)
from tuner.report.dashboard_data.curves import CURVE_COLUMNS, LoadCurves, load_curves
from tuner.report.dashboard_data.head_to_head import (
    H2H_COLUMNS,
    head_to_head_frame,
    head_to_head_lines,
)
from tuner.report.dashboard_data.importance import Importance, param_importances
from tuner.report.dashboard_data.labels import (
    CONFIRMED_TOK_GPU,
    LOAD_AT_SLA,
    STATES,
    TOK_GPU,
    USD_MTOK,
    USER_P50,
    USER_P90,
    page_url,
    param_label,
    param_value,
)
from tuner.report.dashboard_data.logs import log_tail, run_dirs
from tuner.report.dashboard_data.points import (
    POINT_COLUMNS,
    ParetoFront,
    compare_points,
    measured_points,
    parallelism,
    pareto_front,
)
from tuner.report.dashboard_data.predictions import (
    PVM_COLUMNS,
    PredictedVsMeasured,
    load_predicted_vs_measured,
    predicted_vs_measured,
)
from tuner.report.dashboard_data.quality import (
    FlipView,
    quality_answers,
    quality_figures,
    quality_flips,
)
from tuner.report.dashboard_data.source import (
    STORAGE_ENV,
    StudyData,
    data_version,
    open_store,
    read_studies,
    read_study,
    sqlite_file,
    storage_url,
    with_retry,
)
from tuner.report.dashboard_data.studies import (
    StudySummary,
    best_of,
    compare_frame,
    model_name,
    overview_frame,
    sla_text,
    sla_user_floor,
    summarize,
)
from tuner.report.dashboard_data.trials import (
    filter_trials,
    option_order,
    param_columns,
    progress_frame,
    sort_trials,
    trials_frame,
)
from tuner.spec.space import describe  # the pages' configuration text, as the tables write it
from tuner.verdict.choose import BY, Targets  # the Choose page's inputs, as `tuner choose` takes
from tuner.verdict.rules import figure  # a trial's one figure, as every page and command shows it

__all__ = [
    "BY", "CHART_LIMIT", "CHOICE_COLUMNS", "H2H_COLUMNS", "head_to_head_frame",
    "head_to_head_lines", "CONFIRMED_TOK_GPU", "CURVE_COLUMNS", "GAP", "HARDWARE",
    "LEVEL_COLUMNS", "LOAD_AT_SLA", "POINT_COLUMNS", "PVM_COLUMNS", "STATES", "STORAGE_ENV",
    "TOK_GPU", "USD_MTOK", "USER_P50", "USER_P90", "BestCard", "Drawn", "FailureGroup",
    "Importance", "LaunchView", "LoadCurves", "ParetoFront", "PredictedVsMeasured", "Ranking",
    "FlipView", "StudyData", "StudySummary", "Targets", "best_card", "best_of", "choice_points",
    "compare_frame", "compare_points", "confirmation_text", "data_version", "describe",
    "drawn_points", "export_files", "failure_groups", "figure", "filter_trials", "launch_view",
    "levels_frame", "load_curves", "load_predicted_vs_measured", "log_tail", "measured_points",
    "model_name", "open_store", "option_order", "overview_frame", "page_url", "param_columns",
    "param_importances", "param_label", "param_value", "parallelism", "pareto_front",
    "predicted_vs_measured", "price_text", "progress_frame", "quality_answers", "quality_figures",
    "quality_flips",
    "rank_studies",
    "read_studies", "read_study", "run_dirs", "sla_text", "sla_user_floor", "sort_trials",
    "sqlite_file", "storage_url", "summarize", "trials_frame", "with_retry",
]
