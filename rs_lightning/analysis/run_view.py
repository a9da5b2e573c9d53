"""One certification run as the reports see it: its rows (restricted to its recorded subset) and its
settings, checked on loading (rows of two protocols in one file, unmerged shards, repeated inputs are
refused), with the metrics and the norm conversions the reports need.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rs_lightning.runs import (
    ResultFileError,
    RunRecord,
    RunSummary,
    fingerprints,
    in_subset,
    read_results,
    settings_mismatch,
)
from rs_lightning.smoothing.certificate import NORMS, Certificate, default_norm
from rs_lightning.validation import ConfigError

from .budget import class_shares
from .metrics import (
    ECDF_GRID,
    average_certified_radius,
    certified_accuracy,
    flagged_total,
    pa_ecdf,
    true_label_pa,
)


@dataclass
class Run:
    """One certification run: its ``certify.tsv`` rows and the settings recorded next to it (may record
    nothing); ``converted_from``: the norm its radii were converted from (:meth:`in_norm`)."""

    path: Path
    rows: dict[str, np.ndarray]
    settings: RunRecord = field(default_factory=RunRecord)
    method: str | None = None
    label: str = ""
    base_label: str = ""  # the label before it was made unique among the runs passed with it
    converted_from: str | None = None

    @property
    def name(self) -> str:
        return self.path.stem if self.path.is_file() else self.path.name

    @property
    def has_counts(self) -> bool:
        """Whether the TSV has ``nA`` and ``n`` (old Cohen TSVs have not: no ECDF, no budget conversion)."""
        return "nA" in self.rows and "n" in self.rows

    @property
    def sigma(self) -> float | None:
        sigma = self.settings.sigma
        return None if sigma is None else float(sigma)

    @property
    def alpha(self) -> float | None:
        alpha = self.settings.alpha
        return None if alpha is None else float(alpha)

    @property
    def norm(self) -> str:
        """The ball the ``radius`` column is for: ``l2`` (also every run written before norms existed),
        ``l1`` or ``linf``."""
        return str(self.settings.norm or default_norm(self.noise))

    @property
    def noise(self) -> str:
        """The smoothing noise (``gaussian`` for every run written before noises existed)."""
        return str(self.settings.noise or "gaussian")

    @property
    def certificate(self) -> Certificate:
        return Certificate(self.noise, self.norm)

    @property
    def dim(self) -> int | None:
        """The number of input coordinates d = C·H·W, if recorded."""
        dim = self.settings.dim
        return None if dim is None else int(dim)

    @property
    def radius_scale(self) -> float | None:
        """s in radius = s·Φ⁻¹(pA_lower) of a Gaussian run: σ (L2, L1) or σ/√d (L∞); what budget
        conversions scale radii by. None without σ or for another noise."""
        if self.sigma is None or self.noise != "gaussian":
            return None
        return self.certificate.gaussian_scale(self.sigma, self.dim)

    def in_norm(self, norm: str | None, dim: int | None = None) -> Run:
        """This run with its radii stated in ``norm`` (None: as certified), for Gaussian runs
        (:meth:`Certificate.conversion_factor`): L2 → L∞ divides by √d (the L∞ ball of radius r lies in the
        L2 ball of radius √d·r); L∞ → L2 multiplies back, which is valid only for Gaussian noise, not for a
        randomized pipeline (ARS certifies L∞ only). ``dim`` fills in d for runs that record none."""
        if norm is None or norm == self.norm:
            return self
        if norm not in NORMS:
            raise ConfigError("--norm", norm, "one of " + ", ".join(NORMS))
        if self.noise != "gaussian":
            raise ResultFileError(
                f"{self.path} certifies {self.noise} noise in {self.norm}: its radii are converted only for "
                f"Gaussian noise; certify it with norm={norm} instead (if {self.noise} has that certificate)"
            )
        d = self.dim if self.dim is not None else dim
        if d is None:
            raise ResultFileError(
                f"{self.path}: its radii are {self.norm} and converting them to {norm} needs the input "
                "dimension d = C*H*W, which this run does not record (a Cohen TSV, or certified before "
                "rs-lightning recorded it): pass --dim D"
            )
        if self.settings.pipeline:
            raise ResultFileError(
                f"{self.path} certifies a randomized pipeline ({self.settings.pipeline.get('mode')}), "
                f"whose guarantee is L-infinity only: it has no {norm} radius here; drop --norm {norm}"
            )
        factor = self.certificate.conversion_factor(norm, d)
        rows = {**self.rows, "radius": self.rows["radius"] * factor}
        settings = dataclasses.replace(self.settings, norm=norm, dim=int(d))
        return dataclasses.replace(self, rows=rows, settings=settings, converted_from=self.norm)

    @property
    def num_inputs(self) -> int:
        return int(self.rows["idx"].size)

    @property
    def n(self) -> int | None:
        """n, the estimation draws (the largest budget under input-specific sampling): from settings, else
        from the TSV's ``n`` column."""
        return self._setting_or_column(self.settings.n, "n")

    @property
    def mean_n(self) -> float | None:
        """Mean estimation draws per input (below ``n`` under input-specific sampling)."""
        return float(np.mean(self.rows["n"])) if "n" in self.rows and self.num_inputs else None

    @property
    def n0(self) -> int | None:
        return self._setting_or_column(self.settings.n0, "n0")

    def _setting_or_column(self, setting: int | None, column: str) -> int | None:
        if setting is not None:
            return int(setting)
        if column in self.rows:
            values = np.unique(self.rows[column])
            if values.size == 1:
                return int(values[0])
        return None

    def oracle_floor(self, at: Run | None = None) -> np.ndarray | None:
        """Each row's oracle floor under this run's sampler
        (:meth:`~rs_lightning.smoothing.samplers.base.Sampler.oracle_floor`; None for fixed n or without
        counts): at the row's own p̂, or at the p̂ of ``at``, a fixed-n run of the same noise and σ on the
        same inputs (:meth:`paired_with`), for each input where the two selected the same class (both
        predict it, or they record the same selection count nA0: the same seed draws the same selection
        noise); the row's own p̂ elsewhere.

        Why a paired floor: a sequential row's p̂ is taken at a stopping time that depends on its counts, and
        an input stops early when its counts look decisive, that is, further from the nearest threshold than
        p_A. So the floor at the row's own p̂ is on average below the floor at p_A, and draws ÷ floor
        overstates the distance from the limit. A fixed-n run's p̂ does not depend on when it stopped."""
        if self.settings.sampling is None or self.settings.mode == "predict" or not self.has_counts:
            return None
        spec = self.settings.spec
        n_a, n = self.rows["nA"].astype(float), self.rows["n"].astype(float)
        if at is not None:
            if reason := at.paired_with(self):
                raise ResultFileError(f"{at.path} cannot give the oracle floor of {self.path}: {reason}")
            where = {int(i): j for j, i in enumerate(at.rows["idx"])}
            j = np.asarray([where.get(int(i), -1) for i in self.rows["idx"]], dtype=np.int64)
            safe = np.maximum(j, 0)
            same = at.rows["predict"][safe] == self.rows["predict"]
            if "nA0" in self.rows and "nA0" in at.rows:
                same |= at.rows["nA0"][safe] == self.rows["nA0"]
            same &= j >= 0
            n_a = np.where(same, at.rows["nA"][safe], n_a)
            n = np.where(same, at.rows["n"][safe], n)
        return spec.sampler.oracle_floor(spec, n_a, n, self.dim)

    def paired_with(self, run: Run) -> str | None:
        """Why this run cannot give ``run``'s paired oracle floor (:meth:`oracle_floor`), or None if it can:
        it must be a certification at fixed n with counts, on the same inputs, with the same noise, norm and
        σ."""
        if self.settings.mode == "predict" or not self.has_counts:
            return "it holds no counts (nA, n) of a certification"
        fixed = (
            np.unique(self.rows["n"]).size <= 1
            if self.settings.sampling is None
            else self.settings.spec.sampler.fixed_n
        )
        if not fixed:
            return f"its n varies by input (sampling={self.settings.sampling}); the floor needs a fixed-n run"
        if (self.noise, self.norm, self.sigma) != (run.noise, run.norm, run.sigma):
            return (
                f"it certifies {self.noise} {self.norm} at sigma={self.sigma}, the run "
                f"{run.noise} {run.norm} at sigma={run.sigma}"
            )
        if not np.isin(run.rows["idx"], self.rows["idx"]).all():
            return "it lacks some of the run's inputs (idx)"
        return None

    @property
    def acr(self) -> float:
        return average_certified_radius(self.rows["radius"], self.rows["correct"])

    def certified_accuracy(self, radii) -> np.ndarray:
        return certified_accuracy(self.rows["radius"], self.rows["correct"], radii)

    @property
    def abstain_rate(self) -> float:
        return float((self.rows["predict"] < 0).mean()) if self.num_inputs else 0.0

    def pa(self) -> np.ndarray | None:
        """p̂_A per input (true label; 0 if wrong or abstained), or None without ``nA``/``n``."""
        if not self.has_counts:
            return None
        return true_label_pa(self.rows["correct"], n_a=self.rows["nA"], n=self.rows["n"])

    def ecdf(self, grid=ECDF_GRID) -> np.ndarray | None:
        pa = self.pa()
        return None if pa is None else pa_ecdf(pa, grid)

    def protocol(self) -> dict:
        """The values that must agree between compared runs (None = unknown): the idx set and the spec's
        protocol keys (n and n0 fall back to the TSV's columns for old Cohen files)."""
        out = {"subset": frozenset(int(i) for i in self.rows["idx"])} | self.settings.protocol()
        out["n"], out["n0"], out["alpha"] = self.n, self.n0, self.alpha
        data = self.settings.data
        out["dataset"] = (
            None if not isinstance(data, dict) else f"{data.get('name')} {data.get('sha256') or ''}"
        )
        out["inputs_sha256"] = self.settings.inputs_sha256
        return out

    @property
    def train_seed(self) -> int | None:
        """The training seed of the certified checkpoint, if recorded."""
        seed = self.settings.train_seed
        return None if seed is None else int(seed)

    def budget_gaps(self) -> list[str]:
        """What the budget conversion needs and this run lacks (empty: it applies)."""
        needs = (
            ("nA/n columns", self.has_counts),
            ("sigma", self.sigma),
            ("alpha", self.alpha),
            ("Gaussian noise (the conversion's radii are s·Φ⁻¹(p))", self.noise == "gaussian"),
        )
        return [name for name, present in needs if not present]

    def constant_reference(self) -> tuple[int, float]:
        """(c, π_c) of the constant classifier h ≡ c to set beside this run (Sun et al. 2025, Thm. 1): the
        run's own label if it certified a ConstantClassifier, else its majority class (the best such h)."""
        shares = class_shares(self.rows["label"])
        model = self.settings.model
        if isinstance(model, dict) and str(model.get("_target_", "")).endswith(".ConstantClassifier"):
            label = int(model.get("label", 0))
            return label, shares.get(label, 0.0)
        label = max(shares, key=lambda c: (shares[c], -c))
        return label, shares[label]

    def flagged_note(self) -> str | None:
        """How many estimation draws voted for no class (the lattice noise's stated rule: its certificates
        already account for them), or None when none did or the rows do not record it."""
        total = flagged_total(self.rows)
        if not total:
            return None
        return (
            f"{self.label or self.name}: {total} flagged draws (lattice draws outside the exact table, "
            "counted for no class; the certificates already allow for them)"
        )

    def limitations(self) -> str | None:
        """What cannot be computed for this run, or None."""
        if self.has_counts:
            return None
        return (
            f"{self.label or self.name}: old Cohen-format TSV without nA/n columns: ACR and certified "
            "accuracy come from its radius/correct columns; the pA ECDF, its dominance and the budget "
            "conversion need nA and n and are not computed"
        )


def find_run_paths(paths) -> list[Path]:
    """Run folders (holding ``certify.tsv``) or bare TSV files; a folder without one is searched (a Hydra
    multirun folder holds one run per subfolder)."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_file():
            found.append(path)
        elif not path.is_dir():
            raise ResultFileError(f"{path} does not exist")
        elif (path / "certify.tsv").is_file():
            found.append(path)
        else:
            runs = sorted(p.parent for p in path.rglob("certify.tsv"))
            if not runs:
                raise ResultFileError(
                    f"{path} holds no certify.tsv (a run folder holds certify.tsv and settings.json from "
                    "certify.py; a multirun folder holds such folders; pass old Cohen TSV files themselves)"
                )
            found.extend(runs)
    return found


def row_levels(settings: RunRecord, rows: dict):
    """The level of each row's bound (:meth:`~rs_lightning.smoothing.spec.CertificationSpec.row_levels`:
    alpha, or the sampler's level at the row's look); PREDICT: alpha, its test's."""
    if (settings.mode or "certify") != "certify" or "n" not in rows:
        return float(settings.alpha)
    return settings.spec.row_levels(rows["n"], rows.get("nA0"), settings.dim)


def load_run(path: str | Path, sigma: float | None = None) -> Run:
    """Load a run folder (``certify.tsv`` + ``settings.json``/``summary.json``) or a bare TSV file.

    ``sigma`` fills in σ for runs that record none (old Cohen TSVs).
    """
    path = Path(path)
    tsv = path if path.is_file() else path / "certify.tsv"
    rows = read_results(tsv)
    settings = RunRecord()
    if tsv.name == "certify.tsv":
        settings = RunRecord.read(tsv.parent) or settings
        if settings == RunRecord():  # none recorded: the copy in summary.json, if any
            summary = RunSummary.read(tsv.parent)
            settings = settings if summary is None else summary.settings
    every_row, recorded = rows, settings
    if tsv.name == "certify.tsv":
        keep = in_subset(rows["idx"], settings.subset)
        rows = {k: v[keep] for k, v in rows.items()}
    if rows["idx"].size == 0:
        raise ResultFileError(f"{tsv} holds no result rows")
    values, counts = np.unique(rows["idx"], return_counts=True)
    if (counts > 1).any():
        raise ResultFileError(f"{tsv} holds idx {values[counts > 1][:8].tolist()} more than once")
    if tsv.name == "certify.tsv" and list(tsv.parent.glob("certify.shard-*-of-*.tsv")):
        raise ResultFileError(
            f"{tsv.parent} holds unmerged shard files: finish the parts, or merge them with "
            f"python -m rs_lightning.cli.report merge {tsv.parent}"
        )
    if settings.sigma is None and sigma is not None:  # read as recorded with that sigma
        settings = RunRecord.from_dict(settings.to_dict() | {"sigma": float(sigma)})
    if settings.alpha is not None:  # rows that betray another protocol than their settings.json
        mode = settings.mode or "certify"
        level = row_levels(settings, rows)
        mismatch = settings_mismatch(
            rows, mode, level, settings.sigma, settings.norm, settings.dim, settings.noise
        )
        if mismatch is not None:
            raise ResultFileError(
                f"{tsv} holds {mismatch[0]}, but its settings say {mismatch[1]}: rows of two protocols are "
                "mixed in it; certify the run again into a new folder"
            )
    _check_fingerprints(tsv, every_row, recorded)
    return Run(path=path, rows=rows, settings=settings)


def _check_fingerprints(tsv: Path, rows: dict, settings: RunRecord) -> None:
    """Refuse rows of more than one protocol fingerprint, or of another than their settings' (rows copied in
    from another run, whatever the settings they differ in); rows without the column (earlier versions') are
    checked only for what they record of the settings (:func:`settings_mismatch`)."""
    found = fingerprints(rows)
    if not found:
        return
    if len(found) > 1:
        raise ResultFileError(
            f"{tsv} holds rows of {len(found)} protocols (fingerprints {', '.join(found)}): rows of another "
            "run were copied in; certify the run again into a new folder"
        )
    expected = None if settings == RunRecord() else settings.fingerprint()
    if expected is not None and found[0] != expected:
        raise ResultFileError(
            f"{tsv} holds rows of protocol fingerprint {found[0]}, but its settings give {expected}: rows of "
            "another run were copied in; certify the run again into a new folder"
        )


def load_runs(paths, sigma: float | None = None) -> list[Run]:
    """All runs under ``paths`` (see :func:`find_run_paths`)."""
    return [load_run(p, sigma) for p in find_run_paths(paths)]


def assign_labels(runs: list[Run]) -> None:
    """label = "<method> σ=<sigma>" (method: ``run.method``, else the folder name; ", <noise> noise" for a
    noise other than Gaussian); unique by folder name (``base_label``: before that, whatever else is
    passed)."""
    for run in runs:
        sigma = "?" if run.sigma is None else f"{run.sigma:g}"
        noise = "" if run.noise == "gaussian" else f", {run.noise} noise"
        run.label = run.base_label = f"{run.method or run.name} σ={sigma}{noise}"
    labels = [r.label for r in runs]
    for run in runs:
        if labels.count(run.label) > 1:
            run.label = f"{run.label} ({run.path.parent.name}/{run.name})"
