"""Lattice Gaussian noise through the engine: the base classifier's inputs, batching, flagged copies and the
certificate of a row."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import norm
from torch import nn

from rs_lightning.runs import certify_rows
from rs_lightning.smoothing import CertificationSpec, certify_batch, sample_counts
from rs_lightning.smoothing.noise import Phase, noisy_block
from rs_lightning.smoothing.noises import gaussian_lattice as lattice
from rs_lightning.smoothing.noises import noise_of
from rs_lightning.smoothing.stats import clopper_pearson_lower

LATTICE = noise_of("gaussian_lattice")
SIGMA = 0.25


class Recorder(nn.Module):
    """Class 1 where the first pixel is at or above level 128, else 0; keeps every input it saw."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch.Tensor] = []

    def forward(self, x):
        self.seen.append(x.detach().clone())
        first = x.flatten(1)[:, 0]
        return torch.stack([first < 128 / 255, first >= 128 / 255], dim=1).float()


def inputs(count=3, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (count, 1, 4, 4), generator=generator).float() / 255


def counts_of(model, xs, batch_size, num_samples=600, noise=LATTICE):
    return sample_counts(
        model,
        xs,
        list(range(10, 10 + xs.shape[0])),
        phase=Phase.ESTIMATION,
        num_samples=num_samples,
        sigma=SIGMA,
        num_classes=2,
        batch_size=batch_size,
        noise=noise,
    )


def test_every_input_the_model_sees_is_a_lattice_point():
    """Each coordinate of every noisy copy, times 255, is an integer, and the copies of one input differ from
    it by whole levels. Catches the float path (x + σε) taken for the lattice noise."""
    model, xs = Recorder(), inputs()
    counts_of(model, xs, batch_size=256)
    seen = torch.cat(model.seen)
    assert seen.shape[0] == 3 * 600
    assert torch.equal(seen * 255, (seen * 255).round())
    assert (seen * 255 - (seen * 255).round()).abs().max() == 0
    assert float((seen[:600] - xs[0]).abs().max()) > 5 / 255  # noise was added, in whole levels


def test_counts_do_not_depend_on_the_batch_size():
    """The per-input streams: batch sizes 7, 256 and 2000 give the same counts. Catches noise drawn per
    batch rather than per (input, block)."""
    xs = inputs()
    reference = counts_of(Recorder(), xs, batch_size=256)
    for batch_size in (7, 2000):
        assert torch.equal(counts_of(Recorder(), xs, batch_size=batch_size), reference)
    assert not torch.equal(reference, counts_of(Recorder(), xs, batch_size=256, noise=noise_of("gaussian")))


def test_a_copy_with_a_flagged_coordinate_votes_for_no_class(monkeypatch):
    """A table of half-width 1 at σ = 1/255 flags about one coordinate in seven; the counts then sum to the
    copies without one, which perturb reports. Catches flagged copies counted for a class (the bound would
    be taken under the wrong law)."""
    sigma = 1 / 255
    edges = lattice._ceilings(lattice._cdf_edges(sigma, 1, 50), 50)
    table = lattice.LatticeTable(torch.tensor(edges, dtype=torch.int64), 1, 0.0)
    monkeypatch.setattr(lattice, "lattice_table", lambda s: table)
    xs = inputs(1)
    counts = sample_counts(
        Recorder(),
        xs,
        [0],
        phase=Phase.ESTIMATION,
        num_samples=512,
        sigma=sigma,
        num_classes=2,
        batch_size=100,
        noise=LATTICE,
    )
    counted = 0
    for block, rows in enumerate((256, 256)):
        _, ok = noisy_block(xs[0], 0, 0, int(Phase.ESTIMATION), block, rows, sigma, noise=LATTICE)
        counted += rows if ok is None else int(ok.sum())
    assert 0 < int(counts.sum()) == counted < 512


def test_a_row_counts_its_flagged_draws(monkeypatch):
    """The same coarse table through certify_batch: the row's ``flagged`` is the estimation draws that voted
    for no class (n minus the counts, > 0 here), and float noise flags none. Catches flagged draws left out
    of the row (the stated rule would be invisible) or counted from the selection draws."""
    sigma = 1 / 255
    edges = lattice._ceilings(lattice._cdf_edges(sigma, 1, 50), 50)
    table = lattice.LatticeTable(torch.tensor(edges, dtype=torch.int64), 1, 0.0)
    monkeypatch.setattr(lattice, "lattice_table", lambda s: table)
    spec = CertificationSpec(sigma=sigma, n0=20, n=512, alpha=0.001, noise="gaussian_lattice", batch_size=100)
    result = certify_batch(Recorder(), inputs(2), [3, 4], spec, num_classes=2)
    (row, *_) = certify_rows(result, [1, 1], 0.0)
    assert row["flagged"] == 512 - int(result.counts[0].sum()) and 0 < row["flagged"] < 512
    assert np.all(result.flagged == 512 - result.counts.sum(axis=1))
    floats = certify_batch(
        Recorder(), inputs(2), [3, 4], CertificationSpec(sigma=0.25, n0=20, n=512), num_classes=2
    )
    assert [r["flagged"] for r in certify_rows(floats, [1, 1], 0.0)] == [0, 0]


def test_a_row_states_the_lattice_certificate():
    """certify_batch with noise=gaussian_lattice: a classifier constant over the noise has nA = n and the
    radius σΦ⁻¹(CP_lower(n, n, α) − d·τ) (scipy), below Cohen's at the same bound. Catches the float
    certificate written for lattice rows, or d taken from the batch instead of one input."""
    xs = torch.full((2, 1, 4, 4), 200 / 255)
    spec = CertificationSpec(sigma=SIGMA, n0=20, n=500, alpha=0.001, noise="gaussian_lattice", batch_size=64)
    always_one = nn.Sequential(nn.Flatten(), nn.Linear(16, 2))
    with torch.no_grad():
        always_one[1].weight.zero_()
        always_one[1].bias.copy_(torch.tensor([0.0, 1.0]))
    result = certify_batch(always_one, xs, [0, 1], spec, num_classes=2)
    assert np.all(result.n_a == 500) and np.all(result.predict == 1)
    lower = clopper_pearson_lower(500, 500, 0.001)
    slack = 16 * lattice.lattice_table(SIGMA).tv
    np.testing.assert_allclose(result.radius, SIGMA * norm.ppf(lower - slack), rtol=1e-12)
    assert np.all(result.radius < SIGMA * norm.ppf(lower))


def test_an_input_off_the_grid_is_refused():
    with pytest.raises(ValueError, match="off the 8-bit pixel grid"):
        counts_of(Recorder(), torch.full((1, 1, 4, 4), 5 / 16), batch_size=64)
