"""Reading certification runs for reports: one run's view (:mod:`.run_view`), whether runs compare
(:mod:`.protocol`), metrics, uncertainty and verdicts, budgets, dominance and plots. The run folder itself
(its files, records, locks and resume) is :mod:`rs_lightning.runs`. No Lightning, no Hydra."""

from .metrics import (
    ECDF_GRID,
    average_certified_radius,
    certified_accuracy,
    pa_ecdf,
    summarize,
    true_label_pa,
)

__all__ = [
    "ECDF_GRID",
    "average_certified_radius",
    "certified_accuracy",
    "pa_ecdf",
    "summarize",
    "true_label_pa",
]
