"""A run folder's records: ``settings.json`` (:class:`RunRecord`) and ``summary.json`` (:class:`RunSummary`),
written and read only through these classes (their versions: :data:`RUN_FORMAT`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from rs_lightning.smoothing.certificate import L2
from rs_lightning.smoothing.samplers import SAMPLERS
from rs_lightning.smoothing.spec import IDENTITY, PROTOCOL_KEYS, CertificationSpec
from rs_lightning.validation import unreadable_format

from .format import FINGERPRINT_LENGTH, ResultFileError
from .writer import read_json, write_json_atomic

RUN_FORMAT = 2
"""Version of ``settings.json`` and ``summary.json``, their ``format`` key. Readable: 2, 1 and the untagged
files of earlier versions (0, e.g. the runs archived under docs/results/), which may lack keys added since:
the protocol keys of :data:`SETTINGS_ADDED_LATER` take their values there, any other key is None (not
recorded), and their ``certify.tsv`` may lack the columns of :data:`~rs_lightning.runs.format.ADDED_LATER`.
Format 2 stores the sampler's settings under ``sampler``; formats 0 and 1 stored them under the sampler's name
(``iss``, ``sequential``), which :meth:`RunRecord.from_dict` reads, and a sampler's settings added since take
its :attr:`~rs_lightning.smoothing.samplers.base.Sampler.added_later` values."""


SETTINGS_ADDED_LATER = {
    "mode": "certify",
    "precision": "32",
    "sampling": "cohen",
    "noise": "gaussian",
    "norm": L2,
}
"""Values of protocol keys that runs recorded before the keys existed had implicitly (every such run was an
fp32 CERTIFY with Cohen's sampling of Gaussian L2 radii)."""


UNSET_UNFINGERPRINTED = ("quantized",)
"""Identity keys added after rows had fingerprints: left out of the fingerprint while unset (None), so every
run that does not set them keeps the fingerprint it had before they existed."""

_FORMAT1_SAMPLER_KEYS = ("iss", "sequential")
"""The keys format 1 stored the samplers' settings under, each null unless that sampler ran."""


def _check_format(values, source: str) -> None:
    if not isinstance(values, dict):
        raise ResultFileError(f"{source} is not a JSON object; restore it or choose another output_dir")
    if why := unreadable_format(values, RUN_FORMAT):
        raise ResultFileError(f"{source} has {why}; update rs-lightning")


SpecRecord = dataclasses.make_dataclass(
    "SpecRecord",
    [(f.name, Any, dataclasses.field(default=None, metadata=f.metadata)) for f in fields(CertificationSpec)],
    frozen=True,
    namespace={"__module__": __name__},
)
SpecRecord.__doc__ = """The values of a :class:`~rs_lightning.smoothing.spec.CertificationSpec` as a run
records them: its fields, in its order, each None where not recorded (``sampler`` a dict of the sampler's
settings, ``{}`` for one without). Built from the spec's fields (with their metadata: help, role), so a key
added to the spec is recorded without a second declaration."""

_IDENTITY = {"role": IDENTITY}


@dataclass(frozen=True)
class RunRecord(SpecRecord):
    """What a certification run records in ``settings.json``: the values of its
    :class:`~rs_lightning.smoothing.spec.CertificationSpec` (:class:`SpecRecord`, in the spec's order), then
    the model, inputs and devices it certified; None = not recorded. Its one stored form is :meth:`to_dict`
    (:meth:`write`), its one reading :meth:`from_dict` (:meth:`read`), which fills in what earlier versions
    lacked (:data:`RUN_FORMAT`). A field of role ``identity`` (as σ in the spec) is one a resume must match
    (:data:`IDENTITY_KEYS`)."""

    train_sigma: float | None = None  # the checkpoint's sigma (None: published or parameter-free)
    train_noise: str | None = None
    sigma_overridden: bool | None = None
    device: str | None = field(default=None, metadata=_IDENTITY)  # the device type (cpu, cuda)
    tf32: dict | None = None
    subset: dict | None = None  # skip, start, max, num_inputs
    checkpoint: str | None = None
    checkpoint_sha256: str | None = field(default=None, metadata=_IDENTITY)
    model: dict | None = field(default=None, metadata=_IDENTITY)
    method: str | None = None  # the training method's class name
    train_seed: int | None = None
    inputs_sha256: str | None = None
    quantized: bool | None = field(default=None, metadata=_IDENTITY)  # quantize=true: inputs rounded to k/255
    data: dict | None = field(default=None, metadata=_IDENTITY)  # the data module's describe()
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
        for key in UNSET_UNFINGERPRINTED:
            if identity[key] is None:
                del identity[key]
        sampling, settings = identity["sampling"], identity.pop("sampler")
        identity |= dict.fromkeys(_FORMAT1_SAMPLER_KEYS)
        if settings:
            later = SAMPLERS[sampling].added_later if sampling in SAMPLERS else {}
            identity[sampling] = {k: v for k, v in settings.items() if k not in later or later[k] != v}
        canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:FINGERPRINT_LENGTH]

    def indices(self) -> list[int]:
        """The input indices of the run (its ``subset``)."""
        subset = self.subset
        return [subset["start"] + subset["skip"] * j for j in range(subset["num_inputs"])]


IDENTITY_KEYS = tuple(f.name for f in fields(RunRecord) if f.metadata.get("role") == IDENTITY)
"""With the spec's protocol keys: what a resume must match (what the rows were certified of — σ, the
checkpoint's sha256, the model, the data — and the device type, whose noise generators differ: CPU and CUDA
rows would not come from one stream); the fields of role ``identity``."""


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
