"""The run folder: what a certification run writes and how it is read back, resumed, locked and merged.

- :mod:`~rs_lightning.runs.format`: the result files (``certify.tsv``, ``predict.tsv``), their columns and
  rows, reading them;
- :mod:`~rs_lightning.runs.writer`: appending rows safely (crash-repairing) and writing JSON atomically;
- :mod:`~rs_lightning.runs.record`: ``settings.json`` and ``summary.json`` (:class:`RunRecord`,
  :class:`RunSummary`) and the protocol fingerprint every row carries;
- :mod:`~rs_lightning.runs.locks`: the locks of files, folders and the ranks of a distributed run;
- :mod:`~rs_lightning.runs.parts`: ``shard=i/k`` part files and their merge;
- :mod:`~rs_lightning.runs.resume`: whether a folder's rows match this run's spec.

Below :mod:`rs_lightning.certification` (which runs a certification into a folder) and
:mod:`rs_lightning.analysis` (which reads folders); above the core (:mod:`rs_lightning.smoothing`).
"""

from .format import (
    ADDED_LATER,
    COLUMNS,
    FINGERPRINT,
    FLAGGED,
    PREDICT_COLUMNS,
    ResultFileError,
    ResultTable,
    certify_rows,
    file_formats,
    fingerprints,
    in_subset,
    predict_rows,
    read_results,
    result_table,
)
from .locks import FolderLock, hold_rank_lock, try_flock
from .parts import done_indices, merge_parts, part_tables, run_columns, shard_table
from .record import IDENTITY_KEYS, RUN_FORMAT, SETTINGS_ADDED_LATER, RunRecord, RunSummary
from .resume import check_resume, settings_mismatch
from .writer import ResultWriter, read_json, write_json_atomic

__all__ = [
    "ADDED_LATER",
    "COLUMNS",
    "FINGERPRINT",
    "FLAGGED",
    "IDENTITY_KEYS",
    "PREDICT_COLUMNS",
    "RUN_FORMAT",
    "SETTINGS_ADDED_LATER",
    "FolderLock",
    "ResultFileError",
    "ResultTable",
    "ResultWriter",
    "RunRecord",
    "RunSummary",
    "certify_rows",
    "check_resume",
    "done_indices",
    "file_formats",
    "fingerprints",
    "hold_rank_lock",
    "in_subset",
    "merge_parts",
    "part_tables",
    "predict_rows",
    "read_json",
    "read_results",
    "result_table",
    "run_columns",
    "settings_mismatch",
    "shard_table",
    "try_flock",
    "write_json_atomic",
]
