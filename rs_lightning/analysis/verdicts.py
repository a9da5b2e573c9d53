"""Resolved verdicts between the runs of one report: entries, seeds and the family's error rate.

An *entry* is one recipe at one σ: a single run, or several runs of the same method and σ whose checkpoints
were trained with different seeds (``train_seed`` in settings.json). Two entries at the same σ are compared
on their p_A curves and on certified accuracy over the radius grid with the paired procedures of
:mod:`.uncertainty`, once for every pairing of their seeds; a side counts as resolved above at a point only
if it is in **every** pairing, so a verdict survives the spread between training seeds, and with one seed each
the verdict says it covers only the resampling of test inputs (retraining the same recipe moved MACER's ACR on
MNIST by about the published seed spread, docs/results.md). The comparisons of one report are corrected by
Bonferroni: each pairing runs at β / (pairs × pairings), so the report's p_A verdicts hold together with
probability ≥ 1 − β, and so do its certified-accuracy verdicts (both families at once: ≥ 1 − 2β); each ΔACR
and certified-accuracy difference CI is at that same level, on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import product

import numpy as np

from rs_lightning.analysis.protocol import same_inputs, sigma_groups
from rs_lightning.analysis.run_view import Run

from .metrics import ECDF_GRID
from .uncertainty import (
    DEFAULT_BETA,
    RESAMPLES,
    Counts,
    acr_ci,
    certified_accuracy_bands,
    check_beta,
    pa_curve_band,
    paired_acr_ci,
    paired_certified_accuracy,
    paired_pa_curves,
)

WIDE = 0.1
"""A p_A band whose input term (what more inputs narrow: the DKW term and the allowed misses) exceeds this
half-width gets a warning naming its width (too few inputs)."""


def counts_of(run: Run) -> Counts | None:
    """The run's rows for the bands (None without nA/n); sequential rows know their number of looks."""
    if not run.has_counts:
        return None
    spec = run.settings.spec
    looks = spec.sampler.looks(spec) if spec.mode == "certify" else 1
    return Counts.from_rows(run.rows, looks=looks)


def recipe(run: Run) -> tuple:
    """What runs must share to count as training seeds of one recipe: the method, σ, noise, norm, the
    architecture and the dataset. A method's hyperparameters are not recorded in a run folder: runs of one
    method with other hyperparameters must not be passed as seeds of one entry (docs/comparing.md)."""
    model, data = run.settings.model, run.settings.data
    target = model.get("_target_") if isinstance(model, dict) else None
    dataset = (data.get("name"), data.get("sha256")) if isinstance(data, dict) else None
    return (run.method or run.name, run.sigma, run.noise, run.norm, target, dataset)


def entries(runs: Sequence[Run]) -> list[list[Run]]:
    """Runs grouped into entries: runs of one :func:`recipe` with distinct recorded training seeds form one
    entry; every other run is its own."""
    groups: dict[tuple, list[Run]] = {}
    for run in runs:
        key = recipe(run) if run.train_seed is not None else ("run", id(run))
        groups.setdefault(key, []).append(run)
    out = []
    for group in groups.values():
        seeds = [r.train_seed for r in group]
        out += [group] if len(set(seeds)) == len(seeds) else [[r] for r in group]
    return out


def entry_label(entry: list[Run]) -> str:
    if len(entry) == 1:
        return entry[0].label
    base = entry[0].base_label or entry[0].label
    return f"{base} ({len(entry)} seeds: {', '.join(str(r.train_seed) for r in entry)})"


def run_uncertainty(run: Run, radii, beta: float = DEFAULT_BETA) -> dict:
    """One run's bands: its p_A curve band, certified-accuracy bands at ``radii`` and ACR CI."""
    counts = counts_of(run)
    out: dict = {"label": run.label, "inputs": run.num_inputs}
    base = counts if counts is not None else radius_counts(run)
    out["acr_ci"] = acr_ci(base, beta, run.base_label or run.label)  # not what else was passed
    out["ca_pointwise"], out["ca_simultaneous"] = certified_accuracy_bands(base, radii, beta)
    out["pa_band"] = band = None if counts is None else pa_curve_band(counts, beta)
    if band is not None and (inputs := input_term(band)) > WIDE:
        widest = int(np.argmax(band.upper - band.lower))
        widest_text = f"±{band.max_half_width:.3f} at its widest, pA = {band.x[widest]:g}"
        out["warning"] = (
            f"{run.label}: {run.num_inputs} inputs give a p_A band of ±{inputs:.3f} from the choice of "
            f"inputs alone (β = {beta:g}; {widest_text}, with the Monte-Carlo error of p̂A, which more draws "
            "n narrow); certify more inputs to resolve differences below that"
        )
    return out


def input_term(band) -> float:
    """The half-width a p_A band owes to the choice of inputs (DKW term + allowed misses / M): what more
    inputs narrow; the rest, largest near pA = 1, is the Monte-Carlo error of p̂A, which more draws narrow."""
    return band.parts["dkw"] + band.parts["allowed_misses"] / band.parts["inputs"]


def _intersect(lists: list[list[float]]) -> list[float]:
    common = set(lists[0])
    for values in lists[1:]:
        common &= set(values)
    return sorted(common)


def _combine(results: list[dict]) -> dict:
    """One verdict from every seed pairing's: a side is above at x only where it is in all of them."""
    a_above = _intersect([r["a_above_at"] for r in results])
    b_above = _intersect([r["b_above_at"] for r in results])
    kind = {(True, True): "cross", (True, False): "A>=B", (False, True): "B>=A", (False, False): "unresolved"}
    return {"verdict": kind[(bool(a_above), bool(b_above))], "a_above_at": a_above, "b_above_at": b_above}


def compare_entries(
    runs: Sequence[Run], radii, beta: float = DEFAULT_BETA, resamples: int = RESAMPLES, grid=ECDF_GRID
) -> list[dict]:
    """Every pair of entries at the same σ: resolved verdicts on the p_A curves and on certified accuracy at
    ``radii``, paired ACR and certified-accuracy difference CIs (the union over seed pairings), each at the
    family's Bonferroni level. Raises ConfigError for β outside (0, 1)."""
    beta = check_beta(beta)
    grouped = [(s, entries(group)) for s, group in sigma_groups(list(runs)).items()]
    pairs = [(s, a, b) for s, es in grouped for i, a in enumerate(es) for b in es[i + 1 :]]
    out = []
    for sigma, entry_a, entry_b in pairs:
        pairings = list(product(entry_a, entry_b))
        if not all(same_inputs(a, b) for a, b in pairings):
            # only with --allow-mismatch: no paired verdict on different inputs (idx, data or their hash)
            out.append(
                {
                    "sigma": sigma,
                    "a": entry_label(entry_a),
                    "b": entry_label(entry_b),
                    "skipped": "certified on different inputs",
                }
            )
            continue
        level = beta / (len(pairs) * len(pairings))
        curves, accuracy, acr = [], [], []
        for a, b in pairings:
            names = (str(a.path), str(b.path))
            ca, cb = counts_of(a), counts_of(b)
            if ca is not None and cb is not None:
                curves.append(paired_pa_curves(ca, cb, level, grid, names=names, resamples=resamples))
            base_a, base_b = radius_counts(a), radius_counts(b)
            accuracy.append(
                paired_certified_accuracy(base_a, base_b, radii, level, names=names, resamples=resamples)
            )
            acr.append(paired_acr_ci(base_a, base_b, level, names=names))
        seeds = min(len(entry_a), len(entry_b))
        out.append(
            {
                "sigma": sigma,
                "a": entry_label(entry_a),
                "b": entry_label(entry_b),
                "level": level,
                "seeds": seeds,
                "covers": "training seeds and test inputs" if seeds > 1 else "test inputs only (one seed)",
                "pa": _combine(curves) if curves else None,
                "certified_accuracy": _combine(accuracy),
                "acr_a": float(np.mean([r.acr for r in entry_a])),
                "acr_b": float(np.mean([r.acr for r in entry_b])),
                "acr_difference_ci": (min(c[0] for c in acr), max(c[1] for c in acr)),
                "ca_difference_ci": [
                    (
                        float(min(r["pointwise"].lower[j] for r in accuracy)),
                        float(max(r["pointwise"].upper[j] for r in accuracy)),
                    )
                    for j in range(len(radii))
                ],
            }
        )
    return out


def radius_counts(run: Run) -> Counts:
    """The run's rows for certified accuracy and ACR (nA/n zero-filled for old Cohen TSVs without them)."""
    zeros = np.zeros(run.rows["idx"].shape, dtype=int)
    return Counts.from_rows({"nA": zeros, "n": zeros} | run.rows)


def describe(result: dict | None, what: str) -> str:
    """One line: the verdict and where each side is resolved above (ranges of the grid)."""
    if result is None:
        return f"{what}: not computed (no nA/n)"

    def spans(xs):
        if not xs:
            return "nowhere"
        return f"{len(xs)} points in [{min(xs):g}, {max(xs):g}]"

    words = {"A>=B": "A ≥ B", "B>=A": "B ≥ A", "cross": "they cross", "unresolved": "unresolved"}
    return (
        f"{what}: {words[result['verdict']]} (A above at {spans(result['a_above_at'])}; "
        f"B above at {spans(result['b_above_at'])})"
    )
