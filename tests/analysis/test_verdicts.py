"""Entries, seeds and the family of verdicts in one report."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from rs_lightning.analysis.run_view import Run, assign_labels
from rs_lightning.analysis.verdicts import compare_entries, entries, run_uncertainty
from rs_lightning.runs import RunRecord

M = 600


def run(name: str, method: str, radius: np.ndarray, train_seed: int | None, sigma: float = 0.5) -> Run:
    """A run whose inputs are certified correct with the given radii (0: abstained), n = 10,000 draws each."""
    n = 10_000
    p = np.where(radius > 0, 0.5 + 0.5 * np.tanh(radius), 0.4)
    rows = {
        "idx": np.arange(M),
        "label": np.ones(M, int),
        "predict": np.where(radius > 0, 1, -1),
        "radius": radius,
        "correct": (radius > 0).astype(int),
        "nA": np.round(p * n).astype(int),
        "n": np.full(M, n),
    }
    settings = {
        "sigma": sigma,
        "alpha": 0.001,
        "n": n,
        "n0": 100,
        "train_seed": train_seed,
        "mode": "certify",
    }
    return Run(path=Path(f"/runs/{name}"), rows=rows, settings=RunRecord.from_dict(settings), method=method)


def radii(shift: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(rng.uniform(0.0, 1.5, M) + shift, 0.0, None)


def test_runs_of_one_recipe_with_other_seeds_form_one_entry():
    a0, a1 = run("a0", "A", radii(0, 1), 0), run("a1", "A", radii(0, 2), 1)
    b0, b_unknown = run("b0", "B", radii(0, 3), 0), run("bx", "B", radii(0, 4), None)
    groups = entries([a0, a1, b0, b_unknown])
    assert [[r.name for r in g] for g in groups] == [["a0", "a1"], ["b0"], ["bx"]]
    same_seed = entries([a0, run("a0bis", "A", radii(0, 5), 0)])
    assert len(same_seed) == 2  # the same seed twice is not a seed spread: two entries


def test_a_verdict_holds_only_if_every_seed_pairing_resolves_it():
    """A is far better than B with both of its seeds: resolved across seeds. C equals B with one seed and
    is better with the other: its verdict against B is not resolved (the seed spread covers it)."""
    a = [run("a0", "A", radii(0.6, 1), 0), run("a1", "A", radii(0.6, 2), 1)]
    b = [run("b0", "B", radii(0.0, 3), 0), run("b1", "B", radii(0.0, 4), 1)]
    c = [run("c0", "C", radii(0.0, 3), 0), run("c1", "C", radii(0.6, 6), 1)]
    runs = [*a, *b, *c]
    assign_labels(runs)
    results = {
        (p["a"].split(" ")[0], p["b"].split(" ")[0]): p
        for p in compare_entries(runs, [0, 0.5, 1.0], resamples=300)
    }
    ab = results[("A", "B")]
    assert ab["seeds"] == 2 and ab["covers"] == "training seeds and test inputs"
    assert ab["certified_accuracy"]["verdict"] == "A>=B" and ab["acr_difference_ci"][0] > 0
    bc = results[("B", "C")]
    assert bc["certified_accuracy"]["verdict"] == "unresolved"
    low, high = bc["acr_difference_ci"]  # the union over pairings: seed c0 ties b0, seed c1 beats both
    assert low < 0 <= high
    assert ab["level"] == pytest.approx(0.05 / (3 * 4))  # Bonferroni: 3 entry pairs x 4 seed pairings


def test_intervals_do_not_depend_on_the_order_of_the_runs():
    """Catches one generator shared by all pairs (an endpoint then moves with the argument order)."""
    runs = [
        run("x", "X", radii(0.1, 1), None),
        run("y", "Y", radii(0.0, 2), None),
        run("z", "Z", radii(0.2, 3), None),
    ]
    assign_labels(runs)
    forward = {(p["a"], p["b"]): p["acr_difference_ci"] for p in compare_entries(runs, [0, 1], resamples=300)}
    backward = {
        (p["a"], p["b"]): p["acr_difference_ci"] for p in compare_entries(runs[::-1], [0, 1], resamples=300)
    }
    for (a, b), (low, high) in forward.items():
        if (a, b) in backward:
            assert backward[(a, b)] == pytest.approx((low, high))
        else:
            assert backward[(b, a)] == pytest.approx((-high, -low))


def test_seeds_of_one_recipe_only_share_an_entry():
    """Catches the grouping of runs that differ in architecture or data as if they were training seeds."""
    a0, a1 = run("a0", "A", radii(0, 1), 0), run("a1", "A", radii(0, 2), 1)
    other_model = dataclasses.replace(
        a1, settings=dataclasses.replace(a1.settings, model={"_target_": "rs_lightning.models.CIFARResNet"})
    )
    assert [len(g) for g in entries([a0, a1])] == [2]
    assert [len(g) for g in entries([a0, other_model])] == [1, 1]


def test_the_acr_interval_of_a_run_does_not_depend_on_the_other_runs():
    """Catches a run's ACR CI seeded by its report label, which changes (made unique) when another run of the
    same method and σ is passed with it."""
    x, twin = run("x", "X", radii(0.1, 1), None), run("twin", "X", radii(0.3, 2), None)
    assign_labels([x])
    alone = run_uncertainty(x, [0, 1])["acr_ci"]
    assign_labels([x, twin])
    assert x.label != x.base_label and run_uncertainty(x, [0, 1])["acr_ci"] == alone


def test_too_few_inputs_are_warned_by_the_input_part_of_the_band():
    """The warning names the width that more inputs would narrow (DKW + allowed misses), not the band's
    widest point, which near pA = 1 is the Monte-Carlo error of p̂A whatever the number of inputs. Catches
    warning a 2,000-input run whose inputs sit at p̂A = 1 ("certify more inputs" would not help)."""

    def at_one(name: str, m: int) -> Run:
        rows = {
            "idx": np.arange(m),
            "label": np.ones(m, int),
            "predict": np.ones(m, int),
            "radius": np.full(m, 1.6),
            "correct": np.ones(m, int),
            "nA": np.full(m, 10_000),
            "n": np.full(m, 10_000),
        }
        settings = RunRecord.from_dict({"sigma": 0.5, "alpha": 0.001, "n": 10_000, "n0": 100})
        return Run(path=Path(f"/runs/{name}"), rows=rows, settings=settings, method="A", label=name)

    many, few = run_uncertainty(at_one("many", 2000), [0]), run_uncertainty(at_one("few", 100), [0])
    assert many["pa_band"].max_half_width > 0.3 and "warning" not in many
    assert "±0.1" in few["warning"] and "from the choice of inputs alone" in few["warning"]
