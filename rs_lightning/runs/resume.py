"""Whether a run folder's rows may be continued by this run: the rows must match its spec. With
``settings.json`` the recorded settings are compared; without it, what each row records of them implicitly
(:func:`settings_mismatch`); in both cases every row's protocol fingerprint. One place for "do these rows
match this spec", which certify.py and the shard merge rely on.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from scipy.stats import beta

from rs_lightning.smoothing.certificate import of
from rs_lightning.smoothing.engine import ABSTAIN
from rs_lightning.smoothing.spec import CertificationSpec
from rs_lightning.smoothing.stats import clopper_pearson_lower
from rs_lightning.validation import ConfigError

from .format import ResultFileError, fingerprints, read_results
from .parts import part_tables
from .record import RunRecord


def settings_mismatch(
    rows: dict,
    mode: str,
    alpha,
    sigma: float | None,
    norm: str | None,
    dim: int | None,
    noise: str | None = None,
) -> tuple[str, str] | None:
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


def check_resume(out: Path, settings: RunRecord, table_path: Path) -> None:
    """Refuse a folder whose rows were made under other statistical settings: those in its ``settings.json``
    (named in the message); without it, what the rows record of them (:func:`_check_rows_match`, naming it);
    and in either case rows whose protocol fingerprint is not this run's (rows copied in from another run,
    differing in any setting). Rows without the column (earlier versions') have only the first two checks."""
    old = RunRecord.read(out)
    if old is not None:
        before, now = old.identity(), settings.identity()
        changed = {k: (before[k], now[k]) for k in now if before[k] != now[k]}
        if changed:
            detail = ", ".join(f"{k}: {a!r} there, {b!r} now" for k, (a, b) in changed.items())
            raise ConfigError(
                "output_dir",
                str(out),
                "a folder certified with the same settings",
                f"It holds results for other settings ({detail}); choose another output_dir so no rows are "
                "mixed",
            )
    fingerprint = settings.fingerprint()
    for path in part_tables(table_path):
        try:
            with warnings.catch_warnings():  # a killed run's last row: its writer warns when it redoes it
                warnings.simplefilter("ignore")
                rows = read_results(path, ("idx",)) if path.stat().st_size else {}
        except ResultFileError:
            continue  # a malformed or foreign file: the writer and the merge refuse it
        if old is None and rows:
            _check_rows_match(table_path, path, rows, settings.spec, settings.dim)
        other = [f for f in fingerprints(rows) or () if f != fingerprint]
        if other:
            where = "and no settings.json" if old is None else "though settings.json matches (copied rows)"
            found = f"rows of another protocol (fingerprint {other[0]})"
            _refuse_rows(table_path, path, found, f"fingerprint {fingerprint}", where)


def _check_rows_match(
    table_path: Path, path: Path, rows: dict, spec: CertificationSpec, dim: int | None
) -> None:
    """Without ``settings.json``, the rows of ``path`` must be what this run would write: their
    ``n``/``n0`` columns fit its n and n0, and the settings each row records implicitly agree with its own —
    ``alpha`` through ``pA_lower`` = the Clopper–Pearson bound of ``nA`` of ``n`` (PREDICT: through
    abstaining exactly where ``pvalue > alpha``), and sigma/norm through ``radius`` = scale·Φ⁻¹(pA_lower)."""
    required = ("n",) if spec.mode == "predict" else ("n", "n0")
    if not set(required) <= rows.keys():
        return  # an old file without these columns: the writer checks its header
    n_a0 = rows.get("nA0")
    if spec.mode == "certify":
        bad = ~spec.sampler.rows_fit(spec, rows["n"], rows["n0"], n_a0, dim)
        expected = spec.sampler.expected(spec)
    else:
        bad, expected = rows["n"] != spec.n, f"n={spec.n}"
    if bad.any():
        j = int(np.argmax(bad))
        found = f"n={int(rows['n'][j])}" + (f", n0={int(rows['n0'][j])}" if "n0" in rows else "")
        _refuse_rows(table_path, path, f"rows with {found} (idx {int(rows['idx'][j])})", expected)
    levels = spec.row_levels(rows["n"], n_a0, dim)  # each row's own level (sequential: by its look)
    mismatch = settings_mismatch(rows, spec.mode, levels, spec.sigma, spec.norm, dim, spec.noise)
    if mismatch is not None:
        _refuse_rows(table_path, path, *mismatch)


def _refuse_rows(
    table_path: Path, path: Path, found: str, now: str, context: str = "and no settings.json"
) -> None:
    raise ConfigError(
        "output_dir",
        str(table_path.parent),
        "a folder certified with the same settings",
        f"{path.name} holds {found} {context}; this run has {now}. Choose another output_dir so no rows are "
        "mixed",
    )
