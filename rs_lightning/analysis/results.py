"""The result files ``certify.tsv`` and ``predict.tsv``: append-only, flushed row by row, resumable.

CERTIFY columns (docs/certification.md, "Output files"): Cohen et al.'s ``idx label predict radius correct
time`` first, then ``nA n pA_lower pA_hat n0 nA0 samples`` (``n``: estimation draws of this input, which
input-specific sampling chooses per input; ``samples``: every draw the input cost, selection or pilot
included). PREDICT columns: ``idx label predict correct time n nA nB pvalue`` (top two counts and the
two-sided binomial test's p-value). Both end with ``protocol``, the run's fingerprint
(:meth:`RunRecord.fingerprint`), so rows of another protocol are recognized wherever they are copied. The rows
are built here, from engine results, for ``certify.py`` and the training callback alike.
A rerun reads the rows already written, skips their indices, and redoes a last line that a killed process
left incomplete. A run folder's ``settings.json`` and ``summary.json`` are written and read only as
:class:`RunRecord` and :class:`RunSummary` (their versions: :data:`RUN_FORMAT`).

**Concurrent writers.** Each file has one writer at a time (an exclusive ``flock`` that the OS drops when the
process dies, so a killed run never blocks its resume). A run folder is locked too (``.lock``): exclusively by
an unsharded or distributed run, shared by ``shard=i/k`` runs, which write ``certify.shard-<i>-of-<k>.tsv``
each. The ranks of a distributed run (``trainer=ddp|ddp_sim``) each hold a shared lock on ``.ranks.lock``
while they certify, and every run that takes the folder checks that none does: a run is refused while any
rank of an earlier one still lives, even once its launcher is gone. The run that
finds every index present merges the parts into ``certify.tsv`` (sorted by idx, written atomically). Rows
do not depend on the process that made them (noise seeded per input), so the merged file equals a
single-process run's except for the ``time`` column.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.stats import beta

from rs_lightning.smoothing.certificate import L2, of
from rs_lightning.smoothing.engine import ABSTAIN
from rs_lightning.smoothing.samplers import SAMPLERS
from rs_lightning.smoothing.spec import PROTOCOL_KEYS, CertificationSpec
from rs_lightning.smoothing.stats import clopper_pearson_lower
from rs_lightning.validation import unreadable_format

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
    "protocol",
)
PREDICT_COLUMNS = ("idx", "label", "predict", "correct", "time", "n", "nA", "nB", "pvalue", "protocol")
FINGERPRINT = "protocol"
"""The column holding the fingerprint of the run that made the row (:meth:`RunRecord.fingerprint`)."""
ADDED_LATER = ("samples", FINGERPRINT)
"""Columns added since the first version, in the order they were added: files written before a column
existed lack it and every later one (:func:`file_formats`), and are resumed in their own format (the versions:
:data:`RUN_FORMAT`)."""
REQUIRED = ("idx", "label", "predict", "radius", "correct")
PREDICT_REQUIRED = ("idx", "label", "predict", "correct")
_INT_COLUMNS = {"idx", "label", "predict", "correct", "nA", "nB", "n", "n0", "nA0", "samples"}
_FINGERPRINT_LENGTH = 16


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


def _format(column: str, value) -> str:
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
        if len(value) != _FINGERPRINT_LENGTH or value.strip("0123456789abcdef"):
            raise ValueError(f"not a fingerprint: {value!r}")
        return value
    if column in _INT_COLUMNS:
        return int(value)
    return _seconds(value) if column == "time" else float(value)


def _parse_line(line: str, header: list[str]) -> dict | None:
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
    pa_hat = result.pa_hat
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
            }
        )
    return rows


def settings_mismatch(
    rows: dict, mode: str, alpha, sigma: float | None, norm: str | None, dim: int | None,
    noise: str | None = None,
) -> tuple[str, str] | None:  # fmt: skip
    """``(what the rows record, what was expected)`` for the first row whose own values betray another
    ``alpha``, sigma, noise or norm than given (None for noise/norm: Gaussian, L2, as runs written before
    the keys existed); None when every row agrees (or the columns are absent). CERTIFY rows
    record alpha through ``pA_lower`` = the one-sided Clopper–Pearson bound of ``nA`` of ``n`` (Cohen et al.
    2019, Alg. 1) and sigma/noise/norm through ``radius``, the certificate's radius at pA_lower; PREDICT
    rows abstain exactly where
    ``pvalue > alpha``. Catches rows of two protocols in one file (a resume after settings.json was lost).
    For CERTIFY, ``alpha`` is the level of each row's bound, one number or one per row
    (``CertificationSpec.row_levels``)."""
    idx = rows.get("idx")
    if mode == "predict":
        if not {"pvalue", "predict"} <= rows.keys():
            return None
        bad = (rows["pvalue"] > alpha) != (rows["predict"] == ABSTAIN)
        if not bad.any():
            return None
        j = int(np.argmax(bad))
        verdict = "abstains" if rows["predict"][j] == ABSTAIN else "does not abstain"
        return (
            f"a row that {verdict} at p-value {rows['pvalue'][j]:.4g} (idx {int(idx[j])}): another alpha",
            f"alpha={alpha}",
        )
    if not {"nA", "n", "pA_lower", "radius", "predict"} <= rows.keys():
        return None
    expected = clopper_pearson_lower(rows["nA"], rows["n"], alpha)
    bad = ~np.isclose(rows["pA_lower"], expected, rtol=1e-8, atol=1e-12)
    if bad.any():
        j = int(np.argmax(bad))
        k, n, low = int(rows["nA"][j]), int(rows["n"][j]), float(rows["pA_lower"][j])
        made_at = float(beta.cdf(low, k, n - k + 1)) if k > 0 else float("nan")  # inverts the bound
        level = float(np.broadcast_to(alpha, np.shape(rows["n"]))[j])
        return (
            f"rows certified at alpha={made_at:.3g} (idx {int(idx[j])}: pA_lower={low:.6g} of nA={k}, n={n})",
            f"alpha={level:.6g}",
        )
    if sigma is None:
        return None
    certified = rows["predict"] != ABSTAIN
    certificate = of(noise, norm)
    radius = certificate.radius(expected, sigma, dim)  # full precision: the column keeps 10 digits
    bad = certified & ~np.isclose(rows["radius"], radius, rtol=1e-6, atol=1e-9)
    if not bad.any():
        return None
    j = int(np.argmax(bad))
    return (
        f"radius={rows['radius'][j]:.6g} at pA_lower={rows['pA_lower'][j]:.6g} (idx {int(idx[j])}): another "
        "sigma, noise or norm",
        f"sigma={sigma}, noise={certificate.noise}, norm={certificate.norm}, where that pA_lower gives "
        f"radius {radius[j]:.6g}",
    )


def predict_rows(result, labels, seconds: float) -> list[dict]:
    """``predict.tsv`` rows (:data:`PREDICT_COLUMNS`) of one engine ``PredictResult``."""
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
        row = _parse_line(line, header)
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


def try_flock(path: str | os.PathLike, shared: bool = False):
    """Open ``path`` for appending (created if missing) and take a non-blocking ``flock`` on it, shared or
    exclusive; the returned file holds the lock until it is closed (or the process ends). None when another
    process holds a conflicting lock."""
    handle = Path(path).open("a", encoding="utf-8")  # noqa: SIM115 (returned: it holds the lock)
    try:
        fcntl.flock(handle.fileno(), (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    return handle


class ResultWriter:
    """Appends rows to a TSV; on open, validates the header and repairs an incomplete last line.
    ``protocol``: the run's fingerprint (:meth:`RunRecord.fingerprint`), written in every row; without one
    (rows made outside a run) the file has no :data:`FINGERPRINT` column. A file of an earlier format
    (:func:`file_formats`) is appended to in its own format."""

    def __init__(
        self, path: str | os.PathLike, columns: tuple[str, ...] = COLUMNS, protocol: str | None = None
    ):
        self.path = Path(path)
        self.columns = columns if protocol is not None else tuple(c for c in columns if c != FINGERPRINT)
        self.protocol = protocol
        self.done: set[int] = set()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = try_flock(self.path)
        if self._file is None:
            raise ResultFileError(
                f"{self.path} is being written by another running process (certify.py into the same "
                "output_dir); wait for it, give each job its own part with shard=i/k, or use another "
                "output_dir"
            ) from None
        self._recover()
        if self.path.stat().st_size == 0:
            self._file.write("\t".join(self.columns) + "\n")
            self._file.flush()

    def _recover(self) -> None:
        if not self.path.exists() or self.path.stat().st_size == 0:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.touch()
            return
        text = self.path.read_text(encoding="utf-8")
        header_line = "\t".join(self.columns)
        if "\n" not in text and header_line.startswith(text):
            self.path.write_text("")  # killed while writing the header
            return
        lines = text.split("\n")
        header = lines[0].split("\t")
        if tuple(header) in file_formats(self.columns):
            self.columns = tuple(header)  # the file's own format (an earlier version's, or this one)
        else:
            raise ResultFileError(
                f"{self.path} has the header {header}, expected {list(self.columns)}; "
                "write to another output_dir instead of mixing formats"
            )
        good_end = len(lines[0].encode("utf-8")) + 1
        for _, line, row in _complete_rows(self.path, lines):
            self.done.add(row["idx"])
            good_end += len(line.encode("utf-8")) + 1
        if good_end < len(text.encode("utf-8")):
            warnings.warn(
                f"{self.path}: dropping an incomplete last row; it will be certified again", stacklevel=3
            )
            with self.path.open("r+b") as f:
                f.truncate(good_end)

    def write(self, row: dict) -> None:
        """Append one row (keys = columns) and flush it to the OS."""
        if int(row["idx"]) in self.done:
            raise ResultFileError(f"idx {row['idx']} is already in {self.path}")
        row = {**row, FINGERPRINT: self.protocol}
        self._file.write("\t".join(_format(c, row[c]) for c in self.columns) + "\n")
        self._file.flush()
        self.done.add(int(row["idx"]))

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_json_atomic(path: str | os.PathLike, data) -> None:
    """Write JSON to a temporary file and rename it over ``path``: readers never see a partial file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


def read_json(path: str | os.PathLike) -> dict:
    """A JSON file written by certify.py; a ResultFileError (one line) if it is empty or corrupt."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ResultFileError(
            f"{path} is unreadable ({err}); restore it or choose another output_dir"
        ) from err


# ------------------------------------------------------------------------------------------------ run records
RUN_FORMAT = 2
"""Version of ``settings.json`` and ``summary.json``, their ``format`` key. Readable: 2, 1 and the untagged
files of earlier versions (0, e.g. the runs archived under docs/results/), which may lack keys added since:
the
protocol keys of :data:`SETTINGS_ADDED_LATER` take their values there, any other key is None (not recorded),
and their ``certify.tsv`` may lack the columns of :data:`ADDED_LATER`. Format 2 stores the sampler's settings
under ``sampler``; formats 0 and 1 stored them under the sampler's name (``iss``, ``sequential``), which
:meth:`RunRecord.from_dict` reads, and a sampler's settings added since take its
:attr:`~rs_lightning.smoothing.samplers.base.Sampler.added_later` values."""

SETTINGS_ADDED_LATER = {
    "mode": "certify", "precision": "32", "sampling": "cohen", "noise": "gaussian", "norm": L2,
}  # fmt: skip
"""Values of protocol keys that runs recorded before the keys existed had implicitly (every such run was an
fp32 CERTIFY with Cohen's sampling of Gaussian L2 radii)."""


_FORMAT1_SAMPLER_KEYS = ("iss", "sequential")
"""The keys format 1 stored the samplers' settings under, each null unless that sampler ran."""

IDENTITY_KEYS = ("sigma", "checkpoint_sha256", "model", "data", "device")
"""With the spec's protocol keys: what a resume must match (what the rows were certified of, and the
device type, whose noise generators differ: CPU and CUDA rows would not come from one stream)."""


def _check_format(values, source: str) -> None:
    if not isinstance(values, dict):
        raise ResultFileError(f"{source} is not a JSON object; restore it or choose another output_dir")
    if why := unreadable_format(values, RUN_FORMAT):
        raise ResultFileError(f"{source} has {why}; update rs-lightning")


@dataclass(frozen=True)
class RunRecord:
    """What a certification run records in ``settings.json``: the values of its
    :class:`~rs_lightning.smoothing.spec.CertificationSpec` (in the spec's order), then the model, inputs and
    devices it certified; None = not recorded. Its one stored form is :meth:`to_dict` (:meth:`write`), its
    one reading :meth:`from_dict` (:meth:`read`), which fills in what earlier versions lacked
    (:data:`RUN_FORMAT`)."""

    sigma: float | None = None
    n0: int | None = None
    n: int | None = None
    alpha: float | None = None
    seed: int | None = None
    batch_size: int | None = None
    split: str | None = None
    noise_block: int | None = None
    mode: str | None = None
    precision: str | None = None
    channels_last: bool | None = None
    compile: bool | None = None
    sampling: str | None = None
    sampler: dict | None = None  # the sampler's settings ({}: it has none)
    norm: str | None = None
    noise: str | None = None
    train_sigma: float | None = None  # the checkpoint's sigma (None: published or parameter-free)
    train_noise: str | None = None
    sigma_overridden: bool | None = None
    device: str | None = None  # the device type (cpu, cuda), whose noise generators differ
    tf32: dict | None = None
    subset: dict | None = None  # skip, start, max, num_inputs
    checkpoint: str | None = None
    checkpoint_sha256: str | None = None
    model: dict | None = None
    method: str | None = None  # the training method's class name
    train_seed: int | None = None
    inputs_sha256: str | None = None
    data: dict | None = None  # the data module's describe()
    dim: int | None = None  # input coordinates d = C*H*W
    pipeline: dict | None = None  # a randomized pipeline's settings (ARS)
    denoiser: dict | None = None  # denoised smoothing: the denoiser, its sigma and objective (f∘D)
    checkpoint_format: str | None = None  # a published checkpoint's layout
    radius_step: float | None = None
    auto: dict | None = None  # precision=auto / channels_last=auto: the choice and its timings
    devices: list[str] | None = None  # one name per certifying process

    def to_dict(self) -> dict:
        """The stored form: every field in order, then ``format``."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)} | {"format": RUN_FORMAT}

    @classmethod
    def from_dict(cls, values: dict, source: str = "settings.json") -> RunRecord:
        """The record of a stored settings dict of any readable version (a ResultFileError naming ``source``
        otherwise): the keys of :data:`SETTINGS_ADDED_LATER` it lacks (or stores as null) take their values
        there, the others None; unknown keys are ignored. An empty dict (an old Cohen TSV) records nothing.
        The sampler's settings are read from ``sampler`` or, in formats 0 and 1, from the key named after the
        sampler; the settings a known sampler added since take its ``added_later`` values."""
        _check_format(values, source)
        if not values:
            return cls()
        names = {f.name for f in dataclasses.fields(cls)}
        record = SETTINGS_ADDED_LATER | {k: v for k, v in values.items() if k in names and v is not None}
        sampling = str(record["sampling"]).lower()
        sampler = values.get("sampler") if "sampler" in values else values.get(sampling)
        if sampler is None and sampling in SAMPLERS and not dataclasses.fields(SAMPLERS[sampling]):
            sampler = {}  # a sampler without settings (every run of formats 0 and 1 without a key for it)
        if isinstance(sampler, dict) and sampling in SAMPLERS:
            sampler = SAMPLERS[sampling].added_later | sampler
        return cls(**record | {"sampler": sampler})

    @classmethod
    def read(cls, folder: str | os.PathLike) -> RunRecord | None:
        """The record of ``folder/settings.json``; None without one, a ResultFileError (one line) if it is
        unreadable."""
        path = Path(folder) / "settings.json"
        return cls.from_dict(read_json(path), str(path)) if path.is_file() else None

    def write(self, folder: str | os.PathLike) -> None:
        write_json_atomic(Path(folder) / "settings.json", self.to_dict())

    @property
    def spec(self) -> CertificationSpec:
        """The run's certification spec (values not recorded take the spec's defaults)."""
        names = [f.name for f in dataclasses.fields(CertificationSpec)]
        return CertificationSpec.from_dict({k: v for k in names if (v := getattr(self, k)) is not None})

    def protocol(self) -> dict:
        """The values of :data:`~rs_lightning.smoothing.spec.PROTOCOL_KEYS` (None: not recorded)."""
        out = {key: getattr(self, key) for key in PROTOCOL_KEYS}
        out["precision"] = None if out["precision"] is None else str(out["precision"])
        return out

    def identity(self) -> dict:
        """What a resume must match, as stored (after a JSON round trip: tuples are lists): the values of the
        spec's protocol keys (:meth:`protocol`) and of :data:`IDENTITY_KEYS`. Not the subset: a resume may
        extend ``max``."""
        stored = RunRecord.from_dict(json.loads(json.dumps(self.to_dict())))
        return stored.protocol() | {key: getattr(stored, key) for key in IDENTITY_KEYS}

    def fingerprint(self) -> str:
        """The run's protocol fingerprint, every row's :data:`FINGERPRINT`: the first 16 hex digits of the
        SHA-256 of :meth:`identity` as canonical JSON (sorted keys, no spaces), in the layout of format 1 so
        that rows written before format 2 keep theirs: the sampler's settings under its name beside
        ``iss`` and ``sequential`` (null unless chosen), without the settings added since at their
        ``added_later`` values."""
        identity = self.identity()
        sampling, settings = identity["sampling"], identity.pop("sampler")
        identity |= dict.fromkeys(_FORMAT1_SAMPLER_KEYS)
        if settings:
            later = SAMPLERS[sampling].added_later if sampling in SAMPLERS else {}
            identity[sampling] = {k: v for k, v in settings.items() if k not in later or later[k] != v}
        canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:_FINGERPRINT_LENGTH]

    def indices(self) -> list[int]:
        """The input indices of the run (its ``subset``)."""
        subset = self.subset
        return [subset["start"] + subset["skip"] * j for j in range(subset["num_inputs"])]


@dataclass(frozen=True)
class RunSummary:
    """What a finished run records in ``summary.json``: its metrics (``summarize`` or
    ``summarize_predictions`` of :mod:`~rs_lightning.analysis.metrics`), throughput and settings. Its one
    stored form is :meth:`to_dict` (:meth:`write`), its one reading :meth:`from_dict` (:meth:`read`)."""

    metrics: dict
    throughput: dict
    settings: RunRecord

    def to_dict(self) -> dict:
        """The stored form: the metrics, ``throughput``, ``settings``, then ``format``."""
        stored = {"throughput": self.throughput, "settings": self.settings.to_dict(), "format": RUN_FORMAT}
        return self.metrics | stored

    @classmethod
    def from_dict(cls, values: dict, source: str = "summary.json") -> RunSummary:
        """The summary of a stored dict of any readable version (see :class:`RunRecord`)."""
        _check_format(values, source)
        metrics = {k: v for k, v in values.items() if k not in ("throughput", "settings", "format")}
        settings = RunRecord.from_dict(values.get("settings") or {}, f"{source} (its settings)")
        return cls(metrics, values.get("throughput") or {}, settings)

    @classmethod
    def read(cls, folder: str | os.PathLike) -> RunSummary | None:
        """The summary of ``folder/summary.json``; None without one, a ResultFileError if it is unreadable."""
        path = Path(folder) / "summary.json"
        return cls.from_dict(read_json(path), str(path)) if path.is_file() else None

    def write(self, folder: str | os.PathLike) -> None:
        write_json_atomic(Path(folder) / "summary.json", self.to_dict())


class FolderLock:
    """``flock`` on ``<folder>/.lock``: ``shared`` for shard runs, exclusive otherwise; refused as well while
    a rank of a distributed run holds ``.ranks.lock`` (see the module) unless ``check_ranks`` is False (the
    ranks of one job that a cluster launched side by side, which hold it themselves)."""

    def __init__(self, folder: str | os.PathLike, shared: bool, check_ranks: bool = True) -> None:
        self.path = Path(folder) / ".lock"
        self._file = try_flock(self.path, shared)
        if self._file is None:
            raise ResultFileError(
                f"output_dir={str(self.path.parent)!r} is in use by another running certify.py "
                f"({'an unsharded run' if shared else 'a run'}); wait for it, run parts side by side with "
                "shard=i/k, or use another output_dir"
            ) from None
        ranks = try_flock(Path(folder) / RANKS_LOCK) if check_ranks else None
        if check_ranks and ranks is None:
            self._file.close()
            raise ResultFileError(
                f"output_dir={str(self.path.parent)!r} is in use by ranks of a distributed certify.py "
                "(trainer=ddp|ddp_sim) that are still running; wait for them to end (they stop within "
                "seconds once their launcher is gone), or use another output_dir"
            ) from None
        if ranks is not None:
            ranks.close()

    def release(self) -> None:
        self._file.close()

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


RANKS_LOCK = ".ranks.lock"
"""Held (shared) by every rank of a distributed run while it certifies (:func:`hold_rank_lock`)."""


def hold_rank_lock(folder: str | os.PathLike):
    """A shared ``flock`` on ``<folder>/.ranks.lock`` for a rank of a distributed run; the returned file
    holds it until closed or until the process ends. A ResultFileError if a run is checking the folder at
    this instant (only a new run whose launcher holds ``.lock``, so this rank's launcher is gone)."""
    handle = try_flock(Path(folder) / RANKS_LOCK, shared=True)
    if handle is None:
        raise ResultFileError(f"{folder} was taken by another run while this rank started; stopping")
    return handle


def shard_table(table: str | os.PathLike, shard: tuple[int, int]) -> Path:
    """``certify.tsv`` → ``certify.shard-<i>-of-<k>.tsv`` (the file part i of k writes)."""
    table = Path(table)
    return table.with_name(f"{table.stem}.shard-{shard[0]}-of-{shard[1]}{table.suffix}")


def part_tables(table: str | os.PathLike) -> list[Path]:
    """The table and every shard file of it that exist: all the rows of a run folder."""
    table = Path(table)
    shards = sorted(table.parent.glob(f"{table.stem}.shard-*-of-*{table.suffix}"))
    return ([table] if table.is_file() else []) + shards


def run_columns(table: str | os.PathLike, columns: tuple[str, ...]) -> tuple[str, ...]:
    """The columns of a new part file of a run whose table has ``columns``: the format of the parts already
    written, if they have an earlier one (a run begun by an earlier version continues in its format, so its
    parts merge), else ``columns``."""
    for path in part_tables(table):
        with path.open(encoding="utf-8") as f:
            first = f.readline()
        header = tuple(first.rstrip("\n").split("\t"))
        if first.endswith("\n") and header in file_formats(columns):
            return header
    return columns


def _complete_rows(path: Path, lines: list[str]):
    """``(lineno, line, row)`` of the complete rows of a result file's text split at newlines. The text
    after the last newline is an unfinished row and is left out, as is a malformed last complete row with
    nothing after it (a killed writer's); any other malformed row, or a repeated idx, is a ResultFileError."""
    header = lines[0].split("\t")
    complete = lines[1:-1]  # the text ends with "\n" when every row is complete; the tail is then ""
    seen: set[int] = set()
    for lineno, line in enumerate(complete, start=2):
        row = _parse_line(line, header)
        if row is None:
            if lineno - 1 == len(complete) and lines[-1] == "":
                return
            raise ResultFileError(f"{path}:{lineno} is malformed: {line!r}; fix or move the file")
        if row["idx"] in seen:
            raise ResultFileError(f"{path}:{lineno} repeats idx {row['idx']}; the file was edited")
        seen.add(row["idx"])
        yield lineno, line, row


def _rows_by_idx(path: Path) -> tuple[str, dict[int, str], set[str]]:
    """Header line, ``{idx: line}`` of a result file's complete rows (see :func:`_complete_rows`) and the
    fingerprints they carry (none without the column)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    by_idx, found = {}, set()
    for _, line, row in _complete_rows(path, lines):
        by_idx[row["idx"]] = line
        if FINGERPRINT in row:
            found.add(row[FINGERPRINT])
    return lines[0], by_idx, found


def done_indices(table: str | os.PathLike) -> set[int]:
    """Indices with a complete row in the table or any of its shard files."""
    done: set[int] = set()
    for path in part_tables(table):
        if path.stat().st_size:
            done |= set(_rows_by_idx(path)[1])
    return done


def merge_parts(table: str | os.PathLike, wanted: list[int], protocol: str | None = None) -> list[int]:
    """Merge the table and its shard files into ``table`` (sorted by idx, atomically; the shard files are
    then removed) once together they hold every ``wanted`` index; returns the indices still missing (then
    nothing is changed). Two parts holding one index are refused, naming the indices, and so are rows of
    different protocol fingerprints, or of another than ``protocol`` (the run's, from its settings.json)."""
    table = Path(table)
    with (table.parent / ".merge.lock").open("a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # one merger at a time; released when the file closes
        return _merge_locked(table, wanted, protocol)


def _merge_locked(table: Path, wanted: list[int], protocol: str | None) -> list[int]:
    parts = [p for p in part_tables(table) if p.stat().st_size]
    header, merged, owner, overlap, protocols = None, {}, {}, {}, {}
    for path in parts:
        head, rows, found = _rows_by_idx(path)
        if header is not None and head != header:
            raise ResultFileError(f"{path} has the header {head!r}, other parts {header!r}")
        header = head
        for fingerprint in sorted(found):
            protocols.setdefault(fingerprint, path.name)
        for idx, line in rows.items():
            if idx in merged:
                overlap.setdefault((owner[idx].name, path.name), []).append(idx)
            merged[idx], owner[idx] = line, path
    if len(protocols) > 1:
        detail = ", ".join(f"{fingerprint} in {name}" for fingerprint, name in protocols.items())
        raise ResultFileError(
            f"parts of {table} hold rows of different protocols (fingerprints {detail}): rows of another run "
            "were copied in; remove them, or certify into another output_dir"
        )
    foreign = [(f, name) for f, name in protocols.items() if protocol is not None and f != protocol]
    if foreign:
        raise ResultFileError(
            f"{foreign[0][1]} holds rows of another protocol (fingerprint {foreign[0][0]}) than its run's "
            f"settings.json ({protocol}): rows of another run were copied in; remove them, or certify into "
            "another output_dir"
        )
    if overlap:
        detail = "; ".join(f"{a} and {b}: idx {sorted(v)[:8]}" for (a, b), v in overlap.items())
        raise ResultFileError(f"parts of {table} overlap ({detail}); remove the duplicate rows of one part")
    missing = sorted(set(wanted) - set(merged))
    if missing or header is None or parts == [table]:
        return missing
    tmp = table.with_name(f".{table.name}.{os.getpid()}.tmp")
    tmp.write_text(header + "\n" + "".join(merged[i] + "\n" for i in sorted(merged)), encoding="utf-8")
    os.replace(tmp, table)
    for path in parts:
        if path != table:
            path.unlink()
    return []
