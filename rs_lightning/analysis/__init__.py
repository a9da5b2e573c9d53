"""Pure functions over certification results: metrics, result files, plots. No Lightning, no Hydra."""

from .metrics import (
    ECDF_GRID,
    average_certified_radius,
    certified_accuracy,
    pa_ecdf,
    radius_grid,
    summarize,
    true_label_pa,
)
from .results import COLUMNS, ResultFileError, ResultWriter, read_results

__all__ = [
    "COLUMNS",
    "ECDF_GRID",
    "ResultFileError",
    "ResultWriter",
    "average_certified_radius",
    "certified_accuracy",
    "pa_ecdf",
    "radius_grid",
    "read_results",
    "summarize",
    "true_label_pa",
]
