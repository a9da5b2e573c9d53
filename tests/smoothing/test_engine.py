"""The batched CERTIFY/PREDICT engine: determinism, statistical soundness, abstention."""

import numpy as np
import pytest
import torch
from scipy.stats import binom, norm
from torch import nn

from rs_lightning.models import DigitsCNN
from rs_lightning.smoothing import ABSTAIN, Phase, Smooth, certify_batch, predict_batch, sample_counts
from rs_lightning.validation import ConfigError


class Halfspace(nn.Module):
    """f(x) = 1[x_0 > threshold]: its smoothed pA at x is Phi(|x_0 - threshold| / sigma) and the
    smoothed classifier's exact robust radius is |x_0 - threshold| (distance to the hyperplane)."""

    def __init__(self, threshold: float = 0.0):
        super().__init__()
        self.threshold = threshold

    def forward(self, x):
        z = x.flatten(1)[:, 0] - self.threshold
        return torch.stack([-z, z], dim=1)


class Constant(nn.Module):
    def __init__(self, label: int, num_classes: int = 10):
        super().__init__()
        self.label, self.num_classes = label, num_classes

    def forward(self, x):
        out = torch.zeros(len(x), self.num_classes)
        out[:, self.label] = 1.0
        return out


@pytest.fixture(scope="module")
def cnn():
    torch.manual_seed(0)
    return DigitsCNN(input_shape=(1, 8, 8), num_classes=10).eval()


def test_results_identical_across_batch_sizes_and_input_order(cnn):
    xs = torch.rand(5, 1, 8, 8)
    indices = [3, 17, 4, 250, 9]
    runs = [
        certify_batch(cnn, xs, indices, sigma=0.5, num_classes=10, n0=100, n=700, alpha=0.001, batch_size=b)
        for b in (1, 37, 256, 1000, 4000)
    ]
    for other in runs[1:]:
        np.testing.assert_array_equal(other.counts, runs[0].counts)
        np.testing.assert_array_equal(other.n_a0, runs[0].n_a0)
        np.testing.assert_array_equal(other.predict, runs[0].predict)
    # the same inputs in another order and group (as another rank, shard or resume would see them)
    order = [4, 0, 2]
    part = certify_batch(
        cnn,
        xs[order],
        [indices[i] for i in order],
        sigma=0.5,
        num_classes=10,
        n0=100,
        n=700,
        alpha=0.001,
        batch_size=64,
    )
    np.testing.assert_array_equal(part.counts, runs[0].counts[order])
    assert runs[0].counts.sum(axis=1).tolist() == [700] * 5


def test_noise_depends_on_seed_index_and_phase(cnn):
    x = torch.rand(1, 1, 8, 8).repeat(2, 1, 1, 1)
    kw = dict(num_samples=300, sigma=1.0, num_classes=10, batch_size=1000)
    a = sample_counts(cnn, x, [0, 1], phase=Phase.ESTIMATION, seed=0, **kw)
    b = sample_counts(cnn, x, [0, 1], phase=Phase.SELECTION, seed=0, **kw)
    c = sample_counts(cnn, x, [0, 1], phase=Phase.ESTIMATION, seed=1, **kw)
    assert not torch.equal(a[0], a[1])  # same input, different index: different noise
    assert not torch.equal(a, b) and not torch.equal(a, c)


def test_certify_is_statistically_sound_on_an_analytic_classifier():
    """P(certify returns a wrong class, or a radius above the true radius) <= alpha, per input.

    Over many inputs the failure count must stay within a binomial tolerance of alpha, and the
    certificates must not be trivially small (they track the true radius |margin|)."""
    sigma, alpha, n, count = 0.5, 0.05, 1000, 3000
    rng = np.random.default_rng(0)
    margins = rng.uniform(-2.5 * sigma, 2.5 * sigma, size=count)
    xs = torch.zeros(count, 1, 1, 2)
    xs[:, 0, 0, 0] = torch.as_tensor(margins, dtype=torch.float32)
    result = certify_batch(
        Halfspace(), xs, range(count), sigma=sigma, num_classes=2, n0=64, n=n, alpha=alpha, batch_size=20_000
    )
    truth = (margins > 0).astype(int)
    certified = result.predict != ABSTAIN
    wrong_class = certified & (result.predict != truth)
    too_large = certified & (result.predict == truth) & (result.radius > np.abs(margins))
    failures = int((wrong_class | too_large).sum())
    assert failures <= binom.ppf(1 - 1e-6, count, alpha), failures
    assert failures > 0 or alpha * count < 5  # the bound is not vacuous at this alpha
    # non-trivial certificates: close to the true radius where pA is well inside (0.5, 1)
    band = certified & (np.abs(margins) > 0.5 * sigma) & (np.abs(margins) < 2 * sigma) & ~wrong_class
    ratio = result.radius[band] / np.abs(margins[band])
    assert np.median(ratio) > 0.85
    # and the true class's estimation count is Binomial(n, pA) with the analytic pA = Phi(|margin| / sigma)
    pa = norm.cdf(np.abs(margins) / sigma)
    z = (result.counts[np.arange(count), truth] - n * pa) / np.sqrt(n * pa * (1 - pa))
    assert abs(z.mean()) < 5 / np.sqrt(count) and 0.8 < z.std() < 1.2


def test_constant_classifier_reaches_the_radius_cap():
    result = certify_batch(
        Constant(3),
        torch.rand(4, 1, 8, 8),
        [0, 1, 2, 3],
        sigma=0.5,
        num_classes=10,
        n0=10,
        n=2000,
        alpha=0.001,
        batch_size=500,
    )
    assert (result.predict == 3).all() and (result.n_a == 2000).all()
    np.testing.assert_allclose(result.radius, 0.5 * norm.ppf(0.001 ** (1 / 2000)), rtol=1e-12)


def test_predict_abstains_at_the_decision_boundary_and_is_sound_near_it():
    sigma, alpha, count = 0.5, 0.05, 400
    at_boundary = predict_batch(
        Halfspace(),
        torch.zeros(count, 1, 1, 2),
        range(count),
        sigma=sigma,
        num_classes=2,
        n=500,
        alpha=alpha,
        batch_size=50_000,
    )
    # pA = pB = 1/2 exactly: a two-sided test at level alpha rejects (does not abstain) w.p. <= alpha
    assert (at_boundary != ABSTAIN).sum() <= binom.ppf(1 - 1e-6, count, alpha)
    near = torch.zeros(count, 1, 1, 2)
    near[:, 0, 0, 0] = 0.05 * sigma  # g(x) = 1, pA = Phi(0.05) ~ 0.52
    predictions = predict_batch(
        Halfspace(), near, range(count), sigma=sigma, num_classes=2, n=500, alpha=alpha, batch_size=50_000
    )
    assert (predictions == 0).sum() <= binom.ppf(1 - 1e-6, count, alpha)
    far = predict_batch(
        Halfspace(),
        near[:10] + 2 * sigma,
        range(10),
        sigma=sigma,
        num_classes=2,
        n=500,
        alpha=alpha,
        batch_size=5000,
    )
    assert (far == 1).all()


def test_smooth_api_matches_cohen_semantics(cnn):
    smooth = Smooth(cnn, num_classes=10, sigma=0.25)
    x = torch.rand(1, 8, 8)
    label, radius = smooth.certify(x, n0=100, n=1000, alpha=0.001, batch_size=200, index=7)
    batched = certify_batch(
        cnn, x[None], [7], sigma=0.25, num_classes=10, n0=100, n=1000, alpha=0.001, batch_size=1000
    )
    assert (label, radius) == (int(batched.predict[0]), pytest.approx(float(batched.radius[0])))
    assert Smooth.ABSTAIN == ABSTAIN == -1
    # without an index, successive calls use fresh noise (as Cohen's global RNG does) yet are reproducible
    first = [Smooth(Halfspace(), 2, 1.0).certify(torch.zeros(1, 1, 2), 10, 200, 0.001, 100) for _ in range(2)]
    smooth = Smooth(Halfspace(), 2, 1.0)
    again = [smooth.certify(torch.zeros(1, 1, 2), 10, 200, 0.001, 100) for _ in range(2)]
    assert first[0] == first[1] == again[0]
    assert isinstance(smooth.predict(torch.zeros(1, 1, 2), 100, 0.001, 50), int)


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"sigma": 0.0}, "sigma"),
        ({"alpha": 1.0}, "alpha"),
        ({"alpha": 0.0}, "alpha"),
        ({"n0": 0}, "n0"),
        ({"n": 0}, "n"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_bad_arguments_name_the_key(cnn, kwargs, key):
    args = dict(sigma=0.25, n0=10, n=10, alpha=0.001, batch_size=10) | kwargs
    with pytest.raises(ConfigError, match=rf"^{key}="):
        certify_batch(cnn, torch.rand(1, 1, 8, 8), [0], num_classes=10, **args)
