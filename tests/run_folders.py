"""The one builder of synthetic run folders for the tests: rows as certify.py writes them from per-input
counts (the Clopper–Pearson bound of nA of n at alpha, the certificate's radius at it, abstention below ½),
through the project's own writer, with a settings.json beside them. A test that needs rows no protocol
would write (radii, times or draws chosen by hand) gives those columns directly, and the settings with
them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rs_lightning.runs import COLUMNS, ResultWriter, write_json_atomic
from rs_lightning.smoothing import certificate
from rs_lightning.smoothing.spec import CertificationSpec
from rs_lightning.smoothing.stats import clopper_pearson_lower


def write_run_folder(
    folder: Path,
    n_a,
    *,
    n: int = 1000,
    sigma: float = 0.25,
    alpha: float = 0.001,
    seed: int = 0,
    n0: int = 100,
    idx=None,
    labels=None,
    wrong=(),
    noise: str | None = None,
    norm: str | None = None,
    dim: int | None = None,
    record: dict | None = None,
    columns: dict | None = None,
    settings: dict | None = None,
) -> Path:
    """A run folder whose input j (index ``idx[j]``, default j; label ``labels[j]``, default idx % 10) has
    ``n_a[j]`` of ``n`` estimation draws for its selected class: the label, or another class at the
    positions in ``wrong``. settings.json: the given keys only (``sigma n0 n alpha seed split``, and
    ``noise``, ``norm``, ``dim`` when given), or with ``record`` the spec's full settings
    (CertificationSpec.as_dict) and ``record`` on top, as certify.py records them.

    ``columns``: values per input for some result columns (``{"radius": [...], "time": [...]}``) that
    replace the ones computed from the counts. Such rows need not match any protocol, so the run's
    ``settings`` are then given too: settings.json holds exactly that dict (without ``alpha`` the report
    does not check rows against their settings)."""
    if columns is not None and settings is None:
        raise ValueError("columns= needs settings=: rows given by hand match no computed protocol")
    if settings is not None and record is not None:
        raise ValueError("settings= and record= both give settings.json: pass one")
    n_a = np.asarray(n_a)
    idx = np.arange(n_a.size) if idx is None else np.asarray(idx)
    labels = idx % 10 if labels is None else np.asarray(labels)
    lower = clopper_pearson_lower(n_a, n, alpha)
    cert = certificate.of(noise, norm)
    given = {k: np.asarray(v) for k, v in (columns or {}).items()}
    if set(given) - set(COLUMNS):
        raise ValueError(f"columns= names no result column: {sorted(set(given) - set(COLUMNS))}")
    folder.mkdir(parents=True, exist_ok=True)
    with ResultWriter(folder / "certify.tsv") as writer:
        for j, i in enumerate(idx):
            label, abstain = int(labels[j]), lower[j] < 0.5
            predict = -1 if abstain else (label + 1) % 10 if j in wrong else label
            row = {
                "idx": i,
                "label": label,
                "predict": predict,
                "radius": cert.radius(lower[j], sigma, dim),
                "correct": int(predict == label),
                "time": 0.01,
                "nA": n_a[j],
                "n": n,
                "pA_lower": lower[j],
                "pA_hat": n_a[j] / n,
                "n0": n0,
                "nA0": n0,
                "samples": n0 + n,
                "flagged": 0,
            }
            writer.write(row | {k: v[j] for k, v in given.items()})
    if settings is not None:
        (folder / "settings.json").write_text(json.dumps(settings))
    elif record is None:
        minimal = {"sigma": sigma, "n0": n0, "n": n, "alpha": alpha, "seed": seed, "split": "test"}
        minimal |= {k: v for k, v in (("noise", noise), ("norm", norm), ("dim", dim)) if v is not None}
        (folder / "settings.json").write_text(json.dumps(minimal))
    else:
        spec = CertificationSpec(sigma=sigma, n0=n0, n=n, alpha=alpha, seed=seed)
        write_json_atomic(folder / "settings.json", spec.as_dict() | record)
    return folder
