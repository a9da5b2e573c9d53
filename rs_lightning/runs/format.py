"""The result files ``certify.tsv`` and ``predict.tsv``: their columns, their rows, reading them.

CERTIFY columns (docs/certification.md, "Output files"): Cohen et al.'s ``idx label predict radius correct
time`` first, then ``nA n pA_lower pA_hat n0 nA0 samples flagged`` (``n``: estimation draws of this input,
which input-specific sampling chooses per input; ``samples``: every draw the input cost, selection or pilot
included; ``flagged``: estimation draws that voted for no class). PREDICT columns: ``idx label predict
correct time n nA nB pvalue flagged`` (top two counts and the two-sided binomial test's p-value). Both end
with ``protocol``, the run's fingerprint
(:meth:`~rs_lightning.runs.record.RunRecord.fingerprint`), so rows of another protocol are recognized wherever
they are copied. The rows are built here, from engine results, for ``certify.py`` and the training callback
alike.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

COLUMNS = (
    "idx",
    "label",
    "predict",
    "radius",
    "correct",
    "time",
    "nA",
    "n",
    "pA_lower",
    "pA_hat",
    "n0",
    "nA0",
    "samples",
    "flagged",
    "protocol",
)
PREDICT_COLUMNS = (
    "idx",
    "label",
    "predict",
    "correct",
    "time",
    "n",
    "nA",
    "nB",
    "pvalue",
    "flagged",
    "protocol",
)
FINGERPRINT = "protocol"
"""The column holding the fingerprint of the run that made the row (:meth:`RunRecord.fingerprint`)."""
FLAGGED = "flagged"
"""The column counting the estimation draws that voted for no class (a lattice draw outside its exact table,
:mod:`rs_lightning.smoothing.noises.gaussian_lattice`; 0 under float noise), so the certificate's stated
rule is visible in the row."""
ADDED_LATER = ("samples", FINGERPRINT, FLAGGED)
"""Columns added since the first version, in the order they were added: files written before a column
existed lack it and every later one (:func:`file_formats`), and are resumed in their own format (the versions:
:data:`RUN_FORMAT`)."""
REQUIRED = ("idx", "label", "predict", "radius", "correct")
PREDICT_REQUIRED = ("idx", "label", "predict", "correct")
_INT_COLUMNS = {"idx", "label", "predict", "correct", "nA", "nB", "n", "n0", "nA0", "samples", FLAGGED}
FINGERPRINT_LENGTH = 16


def file_formats(columns: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The headers a file of the table with ``columns`` may have, newest first: ``columns``, then without the
    last column of :data:`ADDED_LATER`, without the last two, ... (earlier versions' files)."""
    formats: list[tuple[str, ...]] = []
    for added in range(len(ADDED_LATER), -1, -1):
        columns_then = tuple(c for c in columns if c not in ADDED_LATER[added:])
        if columns_then not in formats:
            formats.append(columns_then)
    return formats


class ResultFileError(ValueError):
    """A result file that cannot be read or appended to safely."""


def format_value(column: str, value) -> str:
    if column == FINGERPRINT:
        return str(value)
    if column in _INT_COLUMNS:
        return str(int(value))
    if column == "time":
        return f"{float(value):.4f}"
    return f"{float(value):.10g}"


def _seconds(value: str) -> float:
    """Seconds from ``12.5`` or Cohen's timedelta text ``H:MM:SS.ffffff``."""
    if ":" not in value:
        return float(value)
    hours, minutes, seconds = value.split(":")
    return 3600 * int(hours) + 60 * int(minutes) + float(seconds)


def _parse(column: str, value: str):
    if column == FINGERPRINT:
        if len(value) != FINGERPRINT_LENGTH or value.strip("0123456789abcdef"):
            raise ValueError(f"not a fingerprint: {value!r}")
        return value
    if column in _INT_COLUMNS:
        return int(value)
    return _seconds(value) if column == "time" else float(value)


def parse_line(line: str, header: list[str]) -> dict | None:
    fields = line.split("\t")
    if len(fields) != len(header):
        return None
    try:
        return {c: _parse(c, v) for c, v in zip(header, fields, strict=True)}
    except ValueError:
        return None


def certify_rows(result, labels, seconds: float) -> list[dict]:
    """``certify.tsv`` rows (dicts keyed by :data:`COLUMNS`) of one engine
    :class:`~rs_lightning.smoothing.engine.CertifyResult` and the inputs' true labels."""
    rows = []
    pa_hat, flagged = result.pa_hat, result.flagged
    for j, label in enumerate(labels):
        predict = int(result.predict[j])
        rows.append(
            {
                "idx": int(result.index[j]),
                "label": int(label),
                "predict": predict,
                "radius": float(result.radius[j]),
                "correct": int(predict == label),
                "time": seconds,
                "nA": int(result.n_a[j]),
                "n": int(result.n[j]),
                "pA_lower": float(result.pa_lower[j]),
                "pA_hat": float(pa_hat[j]),
                "n0": int(result.n0[j]),
                "nA0": int(result.n_a0[j]),
                "samples": int(result.samples[j]),
                FLAGGED: int(flagged[j]),
            }
        )
    return rows


def predict_rows(result, labels, seconds: float) -> list[dict]:
    """``predict.tsv`` rows (:data:`PREDICT_COLUMNS`) of one engine ``PredictResult``."""
    flagged = result.flagged
    return [
        {
            "idx": int(result.index[j]),
            "label": int(label),
            "predict": int(result.predict[j]),
            "correct": int(int(result.predict[j]) == label),
            "time": seconds,
            "n": int(result.n),
            "nA": int(result.n_top[j]),
            "nB": int(result.n_second[j]),
            "pvalue": float(result.pvalue[j]),
            FLAGGED: int(flagged[j]),
        }
        for j, label in enumerate(labels)
    ]


@dataclass(frozen=True)
class ResultTable:
    """A run folder's result file for one ``spec.mode``: its name, columns in order, the columns a reader
    needs, and the function that builds its rows from an engine result, its labels and seconds per input."""

    name: str
    columns: tuple[str, ...]
    required: tuple[str, ...]
    make_rows: Callable[..., list[dict]]

    def path(self, folder: str | os.PathLike) -> Path:
        return Path(folder) / self.name

    def read(self, folder: str | os.PathLike) -> dict[str, np.ndarray]:
        return read_results(self.path(folder), self.required)


TABLES = {
    "certify": ResultTable("certify.tsv", COLUMNS, REQUIRED, certify_rows),
    "predict": ResultTable("predict.tsv", PREDICT_COLUMNS, PREDICT_REQUIRED, predict_rows),
}
"""The one choice between the CERTIFY and PREDICT tables, by ``spec.mode``."""


def result_table(mode: str | None) -> ResultTable:
    """The table of a run of ``mode`` (CERTIFY for records that predate the key)."""
    return TABLES[mode or "certify"]


def in_subset(idx, subset: dict | None) -> np.ndarray:
    """Mask of the indices that belong to a run's recorded subset ``{"skip", "start", "max"}`` (Cohen's
    ``--skip``/``--max``, MACER's ``start_img``); all True without one. certify.py's summary and the report
    both select a run's rows with it, so they never disagree."""
    idx = np.asarray(idx, dtype=np.int64)
    if not subset:
        return np.ones(idx.shape, dtype=bool)
    start, skip, stop = int(subset.get("start", 0)), int(subset.get("skip", 1)), subset.get("max")
    keep = (idx >= start) & ((idx - start) % skip == 0)
    return keep if stop is None else keep & (idx < int(stop))


def read_results(path: str | os.PathLike, required: tuple[str, ...] = REQUIRED) -> dict[str, np.ndarray]:
    """Read a result TSV into ``{column: array}``. Extra or missing optional columns are allowed."""
    path = Path(path)
    if not path.is_file():
        raise ResultFileError(f"no result file at {path}")
    lines = path.read_text().splitlines()
    if not lines:
        raise ResultFileError(f"{path} is empty (expected a header line {' '.join(COLUMNS)})")
    header = lines[0].split("\t")
    missing = [c for c in required if c not in header]
    if missing:
        raise ResultFileError(f"{path} lacks the columns {missing}; its header is {header}")
    rows = []
    for lineno, line in enumerate(lines[1:], start=2):
        row = parse_line(line, header)
        if row is None:
            if lineno == len(lines):
                warnings.warn(
                    f"{path}:{lineno}: ignoring an incomplete last row (a killed run's); it is not a result",
                    stacklevel=2,
                )
                continue
            raise ResultFileError(f"{path}:{lineno} is malformed: {line!r}")
        if "radius" in row and not row["radius"] >= 0:  # NaN too: certify.py writes neither
            raise ResultFileError(
                f"{path}:{lineno} holds radius={row['radius']} (idx {row.get('idx')}): a corrupt or edited "
                "row (a certified radius is a number >= 0); restore the file or certify the run again"
            )
        rows.append(row)
    return {c: np.array([r[c] for r in rows]) for c in header}


def fingerprints(rows: dict[str, np.ndarray]) -> list[str] | None:
    """The distinct protocol fingerprints of rows read by :func:`read_results`, sorted; None for a file
    without the :data:`FINGERPRINT` column (written before it existed, or outside a run)."""
    return None if FINGERPRINT not in rows else sorted({str(f) for f in rows[FINGERPRINT]})


def complete_rows(path: Path, lines: list[str]):
    """``(lineno, line, row)`` of the complete rows of a result file's text split at newlines. The text
    after the last newline is an unfinished row and is left out, as is a malformed last complete row with
    nothing after it (a killed writer's); any other malformed row, or a repeated idx, is a ResultFileError."""
    header = lines[0].split("\t")
    complete = lines[1:-1]  # the text ends with "\n" when every row is complete; the tail is then ""
    seen: set[int] = set()
    for lineno, line in enumerate(complete, start=2):
        row = parse_line(line, header)
        if row is None:
            if lineno - 1 == len(complete) and lines[-1] == "":
                return
            raise ResultFileError(f"{path}:{lineno} is malformed: {line!r}; fix or move the file")
        if row["idx"] in seen:
            raise ResultFileError(f"{path}:{lineno} repeats idx {row['idx']}; the file was edited")
        seen.add(row["idx"])
        yield lineno, line, row
