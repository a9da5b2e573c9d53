"""Lattice Gaussian noise (Voráček & Hein, ICLR 2023): its law, its table, its inputs and its certificate.

Every reference value comes from scipy or an independent mpmath computation, never from the module itself.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch
from scipy.stats import chisquare, norm

from rs_lightning.smoothing.certificate import Certificate
from rs_lightning.smoothing.noises import gaussian_lattice as lattice
from rs_lightning.smoothing.noises.gaussian_lattice import (
    FLAGGED,
    GaussianLattice,
    LatticeTable,
    lattice_table,
)

SIGMA = 0.25
DRAWS = 4_000_000
NOISE = GaussianLattice()


def offsets(sigma=SIGMA, count=DRAWS, seed=0) -> np.ndarray:
    generator = torch.Generator().manual_seed(seed)
    return NOISE.offsets((count,), generator, "cpu", sigma).numpy()


def chi_square_pvalue(draws: np.ndarray, pmf) -> float:
    """Pearson's test of integer ``draws`` against ``pmf(j)``, the values pooled into ~40 bins of equal
    expected count (few bins: the power against a shift or a scale error is not spread over 500 degrees of
    freedom)."""
    values = np.arange(-2000, 2001)
    expected = pmf(values) * draws.size
    edges, total = [values[0]], 0.0
    for v, e in zip(values, expected, strict=True):
        total += e
        if total >= draws.size / 40:
            edges.append(v + 1)
            total = 0.0
    edges[-1] = values[-1] + 1
    observed = np.histogram(np.clip(draws, values[0], values[-1]), bins=np.array(edges) - 0.5)[0]
    expected_binned = np.add.reduceat(expected, np.searchsorted(values, edges[:-1]))
    expected_binned *= observed.sum() / expected_binned.sum()
    return float(chisquare(observed, expected_binned).pvalue)


def exact(j, s=SIGMA * 255):
    return norm.cdf((j + 0.5) / s) - norm.cdf((j - 0.5) / s)


def test_the_draws_follow_the_exact_pmf_and_a_mutated_pmf_is_rejected():
    """4·10⁶ draws at σ = 0.25 against P(j) = Φ((j+½)/(255σ)) − Φ((j−½)/(255σ)) (scipy): accepted at
    p > 10⁻⁴. Power, shown on the same draws: the edges at Φ(k/(255σ)) instead of Φ((k+½)/(255σ)) (a half
    level shift), the slot-to-offset map off by one level, and σ in units of 1/256 instead of 1/255 are each
    rejected at p < 10⁻⁶ (over seeds 0–3: p ≤ 10⁻³⁴, 10⁻¹⁷⁵ and 10⁻¹¹; under the exact pmf 0.18–0.96)."""
    draws = offsets()
    assert chi_square_pvalue(draws, exact) > 1e-4
    s = SIGMA * 255
    half_shift = lambda j: norm.cdf(j / s) - norm.cdf((j - 1) / s)  # noqa: E731
    off_by_one = lambda j: exact(j - 1)  # noqa: E731
    assert chi_square_pvalue(draws, half_shift) < 1e-6
    assert chi_square_pvalue(draws, off_by_one) < 1e-6
    assert chi_square_pvalue(draws, lambda j: exact(j, SIGMA * 256)) < 1e-6
    # the mean and the standard deviation, in levels: se 255σ/√N = 0.032 and 255σ/√(2N) = 0.023
    sd = math.sqrt(float(np.sum(np.arange(-2000, 2001) ** 2 * exact(np.arange(-2000, 2001)))))
    assert abs(draws.mean()) < 5 * s / math.sqrt(DRAWS)
    assert abs(draws.std() - sd) < 5 * s / math.sqrt(2 * DRAWS)
    assert abs(sd - SIGMA * 256) > 7 * s / math.sqrt(2 * DRAWS)  # the 1/256 mutant moves it by 11 se


def test_the_low_bits_of_the_uniform_integers_are_uniform():
    """The top 4 of U's 44 low bits (drawn where a bucket holds an edge) are uniform over 16 values
    (chi-square at 160,000 draws). Catches a uniform integer drawn below 2³¹ or 2³² (top bits always 0: U
    would sit at the start of its bucket, and the draw in the tails would be biased)."""
    bits = lattice.BITS - lattice.BUCKET_BITS
    low = torch.randint(0, 2**bits, (160_000,), generator=torch.Generator().manual_seed(1))
    assert chisquare(np.bincount((low >> (bits - 4)).numpy(), minlength=16)).pvalue > 1e-4


@pytest.mark.parametrize("sigma", [0.12, 0.5])
def test_the_edges_are_the_ceilings_of_an_independent_exact_cdf(sigma):
    """Each edge equals ⌈2⁶⁰·Φ((k+½)/(255σ))⌉ computed here at 80 digits with mpmath's erfc (not its ncdf).
    Catches edges computed in double precision (off by up to 128 near 2⁶⁰) or rounded instead of ceiled."""
    table = lattice_table(sigma)
    half = table.half_width
    assert table.edges.numel() == 2 * half + 2
    ks = list(range(-half - 1, half + 1))[:: max(1, half // 40)] + [half]
    with mpmath.workdps(80):
        s = mpmath.mpf(255) * mpmath.mpf(sigma)
        for k in ks:
            cdf = mpmath.erfc(-(k + mpmath.mpf(0.5)) / s / mpmath.sqrt(2)) / 2
            assert int(table.edges[k + half + 1]) == int(mpmath.ceil(cdf * mpmath.mpf(2) ** 60)), k
    assert bool((table.edges[1:] >= table.edges[:-1]).all())
    # τ: at most one 2⁻⁶⁰ unit per value plus the flagged mass, halved; and above zero (the ceilings move it)
    assert 0 < table.tv * 2**60 <= (2 * half + 2) / 2 + 1


def test_a_flagged_coordinate_makes_its_copy_vote_for_no_class(monkeypatch):
    """With a table of half-width 1 at σ = 1/255 (so that about one coordinate in seven falls outside it),
    perturb marks exactly the copies with a coordinate outside ±1 as not counted, and training's draws put 0
    there."""
    sigma = 1 / 255
    narrow = lattice._cdf_edges(sigma, 1, 50)
    table = LatticeTable(torch.tensor(lattice._ceilings(narrow, 50), dtype=torch.int64), 1, 0.0)
    monkeypatch.setattr(lattice, "lattice_table", lambda sigma: table)
    x = torch.full((1, 2, 2), 128 / 255)
    generator = torch.Generator().manual_seed(5)
    j = NOISE.offsets((64, 1, 2, 2), generator, "cpu", sigma)
    expected = (j != FLAGGED).flatten(1).all(dim=1)
    generator.manual_seed(5)
    _, counted = NOISE.perturb(x, 64, generator, sigma)
    assert counted is not None and torch.equal(counted, expected) and 0 < int(expected.sum()) < 64
    generator.manual_seed(5)
    drawn = NOISE.scaled((64, 1, 2, 2), generator, "cpu", torch.float32, sigma)
    assert torch.equal(drawn == 0, (j == FLAGGED) | (j == 0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_model_input_is_a_pixel_level_computed_from_the_integer_sum(dtype):
    """(k + j)/255 for every coordinate: times 255 an integer (float32), equal to k + j; in bf16 the same
    value rounded once. Catches x + j/255 summed in floating point (off the lattice by rounding)."""
    levels = torch.arange(0, 256, dtype=torch.int32).view(1, 16, 16)
    x = (levels.float() / 255).to(dtype) if dtype == torch.float32 else levels.float() / 255
    generator = torch.Generator().manual_seed(2)
    inputs, counted = NOISE.perturb(x.to(dtype) if dtype == torch.float32 else x, 8, generator, SIGMA)
    generator.manual_seed(2)
    j = NOISE.offsets((8, 1, 16, 16), generator, "cpu", SIGMA)
    want = (levels + j).float() / 255
    assert counted is None and torch.equal(inputs, want.to(inputs.dtype))
    assert torch.equal(want * 255, (want * 255).round())


def test_an_input_off_the_grid_is_refused_not_rounded():
    """sklearn-digits-like pixels v/16 are off the k/255 grid: refused with the fix named."""
    generator = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="off the 8-bit pixel grid.*quantize"):
        NOISE.perturb(torch.full((1, 2, 2), 5 / 16), 4, generator, SIGMA)


def test_the_certificate_gives_up_d_tau_of_pa():
    """Radius σΦ⁻¹(p − d·τ) and its inverse (scipy); needs d. Catches the slack dropped (Cohen's radius) or
    added the wrong way."""
    d, p = 784, np.array([0.4, 0.6, 0.9, 0.999])
    cert = Certificate("gaussian_lattice")
    assert cert.norm == "l2" and cert.needs_dim
    slack = d * lattice_table(SIGMA).tv
    want = np.where(p <= 0.5, 0.0, SIGMA * norm.ppf(np.clip(p - slack, 0.5, 1)))
    np.testing.assert_allclose(cert.radius(p, SIGMA, d), want, rtol=1e-12)
    assert np.all(cert.radius(p[1:], SIGMA, d) < Certificate().radius(p[1:], SIGMA))
    np.testing.assert_allclose(cert.threshold(want[1:], SIGMA, d), p[1:], rtol=1e-12)
    with pytest.raises(ValueError, match="dimension"):
        cert.radius(0.9, SIGMA)


@pytest.mark.parametrize(("ball", "scale"), [("l1", 1.0), ("linf", 1 / 28)])
def test_l1_and_linf_radii_follow_by_the_inclusion_of_balls(ball, scale):
    """L1: the L2 radius (‖δ‖₂ ≤ ‖δ‖₁); L∞: divided by √d = 28 (‖δ‖₂ ≤ √d‖δ‖∞), both with the d·τ slack
    (scipy), and the thresholds invert them. Catches an L∞ radius left at the L2 value (not sound: the L∞
    ball of radius r holds points at L2 distance √d·r) or the slack dropped outside L2."""
    d, p = 784, np.array([0.6, 0.9, 0.999])
    cert = Certificate("gaussian_lattice", ball)
    want = scale * SIGMA * norm.ppf(p - d * lattice_table(SIGMA).tv)
    np.testing.assert_allclose(cert.radius(p, SIGMA, d), want, rtol=1e-12)
    np.testing.assert_allclose(cert.threshold(want, SIGMA, d), p, rtol=1e-12)
    np.testing.assert_allclose(cert.radius_at_tail(1 - p, SIGMA, d), want, rtol=1e-9)


@pytest.mark.parametrize("sigma", [0.12, 1.0])
def test_the_bucket_table_gives_the_offsets_of_a_plain_binary_search(sigma):
    """The same uniform integers located by ``torch.searchsorted`` among all edges give the same offsets as
    the buckets (with the two extreme U of every ambiguous bucket and U = 0 and 2⁶⁰ − 1 added). Catches a
    bucket whose stored offset is off by one, or an ambiguous bucket read as a plain one."""
    table = lattice_table(sigma)
    generator = torch.Generator().manual_seed(3)
    got = NOISE.offsets((300_000,), generator, "cpu", sigma)
    generator.manual_seed(3)  # the same U: its top bits for all, its low bits where the bucket holds an edge
    bits = lattice.BITS - lattice.BUCKET_BITS
    top = torch.randint(0, 2**lattice.BUCKET_BITS, (300_000,), generator=generator, dtype=torch.int32).long()
    searched = table.buckets[top] == lattice.AMBIGUOUS
    u = top << bits
    u[searched] |= torch.randint(0, 2**bits, (int(searched.sum()),), generator=generator)
    slot = torch.searchsorted(table.edges, u, right=True)
    want = (slot - (table.half_width + 1)).to(torch.int32)
    want[(slot == 0) | (slot == table.edges.numel())] = FLAGGED
    assert torch.equal(got[searched], want[searched])
    # the others' offset does not depend on the low bits: both extremes of their bucket give it
    assert torch.equal(got[~searched], want[~searched])
    width = 2 ** (lattice.BITS - lattice.BUCKET_BITS)
    ambiguous = table.buckets == lattice.AMBIGUOUS
    assert 0 < int(ambiguous.sum()) < 0.05 * table.buckets.numel()
    starts = torch.arange(table.buckets.numel(), dtype=torch.int64) * width
    for end in (starts, starts + width - 1):  # both extremes of every bucket without an edge inside
        slot = torch.searchsorted(table.edges, end, right=True)
        reference = (slot - (table.half_width + 1)).to(torch.int32)
        reference[(slot == 0) | (slot == table.edges.numel())] = FLAGGED
        assert torch.equal(table.buckets[~ambiguous], reference[~ambiguous])
