"""Compare certification runs: a Table-2-style table and pA-ECDF dominance.

Sun et al. 2025, *Average Certified Radius is a Poor Metric for Randomized Smoothing* (Table 2; its released
logs: eth-sri/acr-weakness ``data/certify/cifar10/``): ACR can rank two models against their pA ECDFs, so next
to ACR and certified accuracy we report, for every pair at the same σ, whether one ECDF lies above the other
for every pA ≥ 0.5 (y_A(x) ≥ y_B(x) on the grid 0.500 … 1.000) or where they cross, and flag each pair whose
ACR order disagrees with that dominance. Whether runs are comparable at all: :mod:`.protocol`; one run:
:mod:`.run_view`.
"""

from __future__ import annotations

import numpy as np

from rs_lightning.smoothing.certificate import grid_to

from .metrics import ECDF_GRID
from .protocol import mismatched_keys, sigma_groups
from .run_view import Run

ECDF_POINTS = (0.5, 0.9, 0.99, 0.999, 1.0)


_TOL = 1e-12


def ecdf_relation(y_a, y_b, grid=ECDF_GRID) -> tuple[str, list[float]]:
    """Compare two pA ECDFs on ``grid``: ``("identical" | "dominates" | "dominated" | "crosses", crossings)``.

    "dominates": y_A(x) ≥ y_B(x) for every x, strictly somewhere (A ≥ B for every pA ≥ 0.5). Crossings are
    the grid points x where the leader changes: the first x at which the other curve is strictly above,
    after a stretch where the first was (ties in between are skipped).
    """
    diff = np.asarray(y_a, dtype=float) - np.asarray(y_b, dtype=float)
    sign = np.where(diff > _TOL, 1, np.where(diff < -_TOL, -1, 0))
    if not sign.any():
        return "identical", []
    if (sign >= 0).all():
        return "dominates", []
    if (sign <= 0).all():
        return "dominated", []
    nonzero = np.flatnonzero(sign)
    changes = nonzero[1:][sign[nonzero[1:]] != sign[nonzero[:-1]]]
    return "crosses", [float(grid[i]) for i in changes]


def dominance(runs: list[Run], grid=ECDF_GRID) -> list[dict]:
    """Every pair of runs with the same σ and an ECDF: relation, crossings, ACRs and whether ACR disagrees
    (A dominates B but ACR(A) < ACR(B), or the reverse)."""
    out = []
    for sigma, group in sigma_groups(runs).items():
        group = [r for r in group if r.has_counts]
        for i, a in enumerate(group):
            for b in group[i + 1 :]:
                relation, crossings = ecdf_relation(a.ecdf(grid), b.ecdf(grid), grid)
                acr_a, acr_b = a.acr, b.acr
                disagrees = (relation == "dominates" and acr_a < acr_b) or (
                    relation == "dominated" and acr_a > acr_b
                )
                out.append(
                    {
                        "sigma": sigma,
                        "a": a.label,
                        "b": b.label,
                        "relation": relation,
                        "crossings": crossings,
                        "acr_a": acr_a,
                        "acr_b": acr_b,
                        "acr_disagrees": disagrees,
                    }
                )
    return out


def dominance_matrix(group: list[Run], pairs: list[dict]) -> list[list[str]]:
    """Cells [i][j] for runs ``group`` (one σ): "≥" row dominates column, "≤" the reverse, "=" equal,
    "× x, ..." crossing points, "—" on the diagonal or without an ECDF."""
    by_pair = {(p["a"], p["b"]): p for p in pairs}
    symbol = {"dominates": "≥", "dominated": "≤", "identical": "="}
    reverse = {"dominates": "dominated", "dominated": "dominates", "identical": "identical"}
    matrix = []
    for a in group:
        cells = []
        for b in group:
            pair, flipped = by_pair.get((a.label, b.label)), False
            if pair is None:
                pair, flipped = by_pair.get((b.label, a.label)), True
            if a is b or pair is None:
                cells.append("—")
            elif pair["relation"] == "crosses":
                cells.append("× " + ", ".join(f"{x:.3f}" for x in pair["crossings"]))
            else:
                cells.append(symbol[reverse[pair["relation"]] if flipped else pair["relation"]])
        matrix.append(cells)
    return matrix


def default_radii(runs: list[Run], step: float | None = None, max_columns: int = 12) -> list[float]:
    """0, step, … up to the largest radius any run certified (step doubled until ≤ ``max_columns``); step
    None = the runs' norm's step (0.25 for L2/L1, 1/255 for L∞; 0.25 when they differ), or a tenth of the
    largest radius where that is below the step (:func:`~rs_lightning.smoothing.certificate.grid_to`)."""
    fit = step is None
    if step is None:
        steps = {r.certificate.default_step for r in runs}
        step = steps.pop() if len(steps) == 1 else 0.25
    top = max(float(np.max(r.rows["radius"], initial=0.0)) for r in runs)
    while top / step + 1 > max_columns:
        step *= 2
    return [float(r) for r in grid_to(top, step, fit)]


def comparison_table(runs: list[Run], radii, reference: Run | None = None) -> list[dict]:
    """Table-2-style rows: settings, ACR, certified accuracy at ``radii``, abstain rate, ECDF points.

    With ``reference``, a ``protocol`` column says where each run's protocol differs from it.
    """
    table = []
    for run in runs:
        row = {
            "label": run.label,
            "method": run.method or "",
            "sigma": run.sigma,
            "n": run.n,
            "n0": run.n0,
            "alpha": run.alpha,
            "inputs": run.num_inputs,
            "mean_n": run.mean_n,
            "acr": run.acr,
        }
        row |= {f"ca@{r:g}": float(a) for r, a in zip(radii, run.certified_accuracy(radii), strict=True)}
        row["abstain_rate"] = run.abstain_rate
        ecdf = run.ecdf(np.asarray(ECDF_POINTS))
        for j, x in enumerate(ECDF_POINTS):
            row[f"y({x:g})"] = None if ecdf is None else float(ecdf[j])
        if reference is not None:
            keys = mismatched_keys(run, reference)
            row["protocol"] = (
                "reference" if run is reference else ("differs: " + ", ".join(keys) if keys else "ok")
            )
        row["path"] = str(run.path)
        table.append(row)
    return table
