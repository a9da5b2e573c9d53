"""Metrics over per-input certification results (numpy; the functional twins of ``rs_lightning.metrics``).

Definitions follow Cohen et al. 2019 (``analyze.py``: certified accuracy), Zhai et al. 2020 (ACR) and
Sun et al. 2025, *Average Certified Radius is a Poor Metric for Randomized Smoothing* (pA ECDF).
"""

from __future__ import annotations

import numpy as np

from rs_lightning.smoothing.stats import PA_GRID

ECDF_GRID = PA_GRID
"""x grid of the pA ECDF: 0.500, 0.501, ..., 1.000 (as in the acr-weakness release), the core's p grid."""


def certified_accuracy(radius, correct, radii) -> np.ndarray:
    """Share of inputs that are correct with certified radius >= r, for each r (abstain = wrong).

    Cohen et al. 2019 ``ApproximateAccuracy``: over *all* inputs, comparison ``>=``. At r = 0 this is the
    clean accuracy of the smoothed classifier.
    """
    radius, correct = np.asarray(radius, dtype=float), np.asarray(correct, dtype=bool)
    radii = np.atleast_1d(np.asarray(radii, dtype=float))
    if radius.size == 0:
        return np.zeros_like(radii)
    return ((radius[None, :] >= radii[:, None]) & correct[None, :]).mean(axis=1)


def average_certified_radius(radius, correct) -> float:
    """ACR = (1/n) sum_i radius_i * 1[correct_i] (Zhai et al., ICLR 2020); wrong or abstained count as 0."""
    radius, correct = np.asarray(radius, dtype=float), np.asarray(correct, dtype=bool)
    return float(np.where(correct, radius, 0.0).mean()) if radius.size else 0.0


def true_label_pa(correct, pa_hat=None, *, n_a=None, n=None) -> np.ndarray:
    """Per-input p̂A as the seed paper uses it: the share of draws on the true label, 0 if wrong or abstained
    (Sun et al., ICML 2025, Appendix B); the one place that convention lives. From the rows' ``pA_hat``, or
    from their counts ``n_a``/``n`` (0 where n = 0: ISS abstained without sampling)."""
    if (pa_hat is None) == (n_a is None or n is None):
        raise TypeError("true_label_pa takes pa_hat, or n_a and n")
    if pa_hat is None:
        n_a, n = np.broadcast_arrays(np.asarray(n_a, dtype=float), np.asarray(n, dtype=float))
        pa_hat = np.divide(n_a, n, out=np.zeros(n_a.shape), where=n > 0)
    return np.where(np.asarray(correct, dtype=bool), np.asarray(pa_hat, dtype=float), 0.0)


def pa_ecdf(pa, grid=ECDF_GRID) -> np.ndarray:
    """y(x) = share of inputs with p̂A >= x for each x in ``grid`` (Sun et al. 2025, Appendix B)."""
    pa, grid = np.asarray(pa, dtype=float), np.asarray(grid, dtype=float)
    if pa.size == 0:
        return np.zeros_like(grid)
    return (pa[None, :] >= grid[:, None] - 1e-12).mean(axis=1)


def draws_over_floor(n, floor) -> float | None:
    """Mean estimation draws ÷ mean oracle floor (:meth:`~rs_lightning.smoothing.samplers.base.Sampler.
    oracle_floor`): how far a run is from the physical limit; None without a floor or where it is 0."""
    if floor is None or not np.size(floor) or np.sum(floor) <= 0:
        return None
    return float(np.mean(n)) / float(np.mean(floor))


def summarize(
    radius, correct, predict, pa_hat, *, radii, n=None, samples=None, floor=None, ecdf_grid=ECDF_GRID
) -> dict:
    """The ``summary.json`` metrics of one certification run (keys: docs/certification.md, "Output files").

    ``n`` (estimation draws per input) and ``samples`` (all draws per input) add their means ``mean_n`` and
    ``mean_samples`` (input-specific sampling makes them vary by input); ``floor`` (each input's oracle
    floor, :meth:`~rs_lightning.smoothing.samplers.base.Sampler.oracle_floor`) adds ``mean_oracle_floor``
    and ``draws_over_floor`` = mean ``n`` ÷ mean floor (how far the run is from the physical limit).
    """
    correct = np.asarray(correct, dtype=bool)
    pa = true_label_pa(correct, pa_hat)
    cert = certified_accuracy(radius, correct, radii)
    extra = {}
    for key, values in (("mean_n", n), ("mean_samples", samples)):
        if values is not None:
            extra[key] = float(np.mean(values)) if np.size(values) else 0.0
    if floor is not None and n is not None:
        extra["mean_oracle_floor"] = float(np.mean(floor)) if np.size(floor) else 0.0
        extra["draws_over_floor"] = draws_over_floor(n, floor)
    return extra | {
        "num_inputs": int(correct.size),
        "acr": average_certified_radius(radius, correct),
        "clean_accuracy": float(correct.mean()) if correct.size else 0.0,
        "abstain_rate": float((np.asarray(predict) < 0).mean()) if correct.size else 0.0,
        "pa_mean": float(pa.mean()) if correct.size else 0.0,
        "certified_accuracy": {_radius_key(r): float(a) for r, a in zip(radii, cert, strict=True)},
        "pa_ecdf": {"x": [float(x) for x in ecdf_grid], "y": [float(y) for y in pa_ecdf(pa, ecdf_grid)]},
    }


def _radius_key(r: float) -> str:
    return repr(round(float(r), 6))


def summarize_predictions(predict, correct) -> dict:
    """The ``summary.json`` metrics of a PREDICT run: ``accuracy`` (abstain = wrong), ``abstain_rate`` and
    ``error_rate`` (answered a class other than the label). PREDICT's guarantee is about g(x), not the
    label: an answer differs from the smoothed classifier's class with probability <= alpha per input."""
    predict, correct = np.asarray(predict), np.asarray(correct, dtype=bool)
    size = max(int(correct.size), 1)
    return {
        "num_inputs": int(correct.size),
        "accuracy": float(correct.sum() / size),
        "abstain_rate": float((predict < 0).sum() / size),
        "error_rate": float(((predict >= 0) & ~correct).sum() / size),
    }


def flagged_total(rows: dict) -> int | None:
    """The draws of result rows that voted for no class (their ``flagged`` column: lattice draws outside the
    exact table); None for rows written before the column existed."""
    return int(np.sum(rows["flagged"])) if "flagged" in rows else None
