"""The ARS pipeline (Lyu et al., NeurIPS 2024; ubc-systopia/adaptive-randomized-smoothing src/models/)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import norm
from torch import nn

from rs_lightning.models import LeNet, build_classifier
from rs_lightning.models.ars import (
    SIGMA2_FLOOR,
    AdaptiveSmoothing,
    StaticMask,
    build_mask,
    combine,
    mask_norm,
    query_sigmas,
    step2_sigma,
)
from rs_lightning.models.unet import MaskUNet
from rs_lightning.smoothing import Certificate, CertificationSpec, certify_batch
from rs_lightning.validation import ConfigError

GAUSSIAN_LINF = Certificate("gaussian", "linf")


class ConstantMask(nn.Module):
    """w ≡ value (B, 1, H, W), whatever m1 is."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def forward(self, m1):
        return torch.full_like(m1[:, :1], self.value)


class Identity(nn.Module):
    def forward(self, x):
        return x


def test_accounting_identity_holds_for_random_masks():
    """d/σ₁² + ‖w‖²/σ₂² = d/σ² for every mask (the GDP composition gives μ = √d·r/σ), with ‖w‖ over all
    C·H·W coordinates: a mask norm without the channel factor √C breaks it by the factor C."""
    generator = torch.Generator().manual_seed(0)
    for channels, h, w_, f in ((3, 16, 16, 0.5), (1, 56, 56, 0.3), (3, 64, 48, 0.8)):
        d, sigma = channels * h * w_, 0.37
        w = torch.rand(64, 1, h, w_, generator=generator, dtype=torch.float64) ** 3  # norms spread widely
        s1, s2_base = query_sigmas(sigma, f)
        s2 = step2_sigma(w, s2_base, channels, d).flatten()
        total = d / s1**2 + mask_norm(w, channels) ** 2 / s2**2
        assert torch.allclose(total, torch.full_like(total, d / sigma**2), rtol=1e-6)
        wrong = d / s1**2 + w.flatten(1).norm(dim=1) ** 2 / s2**2  # the bug: no channel factor
        assert channels == 1 or not torch.allclose(wrong, total, rtol=1e-3)
    # static: one query at sigma_w = sigma ||w|| / sqrt(d) costs ||w||^2 / sigma_w^2 = d / sigma^2
    pipeline = AdaptiveSmoothing(
        Identity(), sigma=0.5, input_shape=(3, 8, 8), mode="static", mask=StaticMask(input_shape=(3, 8, 8))
    )
    with torch.no_grad():
        pipeline.mask.weight.uniform_(0.0, 1.0, generator=generator)
    x, noise = torch.zeros(1, 3, 8, 8), torch.ones(1, 1, 3, 8, 8)
    with torch.no_grad():
        s_w = float(pipeline.queries(x, noise)[0].flatten()[0])  # x = 0, noise = 1: the noise scale itself
    norm_w = float(mask_norm(pipeline.mask.weight, 3))
    assert norm_w**2 / s_w**2 == pytest.approx(3 * 64 / 0.25, rel=1e-5)


def test_all_ones_mask_with_half_budget_is_cohens_noise():
    """w ≡ 1, f = ½: σ₁ = σ₂ = √2σ, both weights ½, so x̂ − x has mean 0 and variance σ² per coordinate. On
    196,608 coordinates the variance's relative standard error is 0.3%, so the 1% band catches a missing
    channel factor (variance σ²/2 for C = 3) with certainty (swapped weights are invisible at w ≡ 1, f = ½;
    the constant-mask test below catches them)."""
    sigma, shape = 0.5, (3, 16, 16)
    pipeline = AdaptiveSmoothing(
        Identity(), sigma=sigma, input_shape=shape, mode="ars", mask=ConstantMask(1.0)
    ).eval()
    generator = torch.Generator().manual_seed(1)
    x = torch.rand(256, *shape, generator=generator, dtype=torch.float64)
    noise = torch.randn(256, 2, *shape, generator=generator, dtype=torch.float64)
    error = pipeline(x, noise) - x
    assert abs(float(error.mean())) < 4 * sigma / math.sqrt(error.numel())
    assert float(error.var()) == pytest.approx(sigma**2, rel=0.01)
    # and it is Cohen's noise exactly: x + sigma * (eps1 + eps2) / sqrt(2)
    expected = x + sigma * (noise[:, 0] + noise[:, 1]) / math.sqrt(2)
    assert torch.allclose(pipeline(x, noise), expected, atol=1e-12)


@pytest.mark.parametrize("frac", [0.2, 0.5, 0.8])
@pytest.mark.parametrize("value", [0.1, 0.5, 1.0])
def test_average_is_unbiased_and_has_variance_sigma_squared_for_constant_masks(value, frac):
    """E[x̂] = x for a constant mask (inverse-variance average of m₁ and m₂/w). The bias of the plausible
    bug of averaging m₂ instead of m₂/w is (1 − w)·σ₁²/(σ₂² + σ₁²)·x ≥ 0.07 at w = 0.1 and x = 0.8, 200
    standard errors; for any constant w and budget share f the variance is σ² (σ₂ follows ‖w‖). The f ≠ ½
    cases catch a σ₂ computed with the wrong share (e.g. σ/√f for both queries: variance 2.5σ² at f = 0.2,
    0.625σ² at f = 0.8), which f = ½ cannot tell apart."""
    sigma, shape = 0.25, (1, 16, 16)
    pipeline = AdaptiveSmoothing(
        Identity(),
        sigma=sigma,
        input_shape=shape,
        mode="ars",
        mask=ConstantMask(value),
        first_query_budget_frac=frac,
    )
    generator = torch.Generator().manual_seed(2)
    x = torch.full((512, *shape), 0.8, dtype=torch.float64)
    noise = torch.randn(512, 2, *shape, generator=generator, dtype=torch.float64)
    error = pipeline(x, noise) - x
    se = sigma / math.sqrt(error.numel())
    assert abs(float(error.mean())) < 4 * se
    s1, s2_base = query_sigmas(sigma, frac)
    s2 = s2_base * value  # ||w|| / sqrt(d) = value
    m1, m2 = x + s1 * noise[:, 0], value * x + s2 * noise[:, 1]
    buggy = (s2**2 * m1 + s1**2 * m2) / (s2**2 + s1**2)
    assert value == 1.0 or abs(float((buggy - x).mean())) > 50 * se
    assert float(error.var()) == pytest.approx(sigma**2, rel=0.02)


@pytest.mark.parametrize("frac", [0.0, 1.0, 1.5, -0.1, "abc", None, True])
def test_a_budget_share_outside_the_open_unit_interval_is_a_config_error(frac):
    with pytest.raises(ConfigError, match="first_query_budget_frac"):
        query_sigmas(0.5, frac)


def dyadic(tensor: torch.Tensor) -> torch.Tensor:
    return torch.round(tensor * 1024) / 1024


def test_the_mask_never_sees_the_clean_input():
    """With m₁ held fixed bitwise (σ₁ = 1 and dyadic values make x + σ₁ε₁ exact), a different clean x
    leaves the mask bitwise unchanged, while the classifier input changes: w depends on m₁ only."""
    sigma, f, shape = 0.5, 0.25, (1, 16, 16)  # sigma_1 = sigma / sqrt(f) = 1 exactly
    torch.manual_seed(3)
    pipeline = AdaptiveSmoothing(
        Identity(),
        sigma=sigma,
        input_shape=shape,
        mode="ars",
        mask=MaskUNet(input_shape=shape, width=4),
        first_query_budget_frac=f,
    ).eval()
    x, other = dyadic(torch.rand(2, *shape)), dyadic(torch.rand(2, *shape))
    noise = dyadic(torch.randn(2, 2, *shape))
    m1 = x + noise[:, 0]
    shifted = noise.clone()
    shifted[:, 0] = m1 - other  # exact in float32: dyadic values of small magnitude
    assert torch.equal(other + shifted[:, 0], m1)
    with torch.no_grad():
        x_hat, w = pipeline.queries(x, noise)
        other_hat, other_w = pipeline.queries(other, shifted)
    assert torch.equal(w, other_w)
    assert not torch.equal(x_hat, other_hat)
    assert torch.equal(w, pipeline.mask(m1).float())


def test_radius_oracles_of_the_reference():
    """ARS assets/sample_certification_log_cifar_sig05_pad16_ars.txt: the released log's first row
    (k = 64, σ = 0.5, pA_lower = 0.756536) prints r∞ = 0.003136, and the ceiling for n = 5e4, α = 0.05 at
    k = 64, σ = 0.5 is 0.01735 (d = 3·64·64)."""
    d = 3 * 64 * 64
    assert float(GAUSSIAN_LINF.radius(0.756535932600474, 0.5, d)) == pytest.approx(0.003136, abs=5e-7)
    assert GAUSSIAN_LINF.max_radius(0.5, 50_000, 0.05, d) == pytest.approx(0.01735, abs=5e-6)
    # and both against scipy directly: sigma * Phi^-1(p) / sqrt(d)
    assert float(GAUSSIAN_LINF.radius(0.9, 0.25, 784)) == pytest.approx(0.25 * norm.ppf(0.9) / 28)
    with pytest.raises(ValueError, match="dimension"):
        GAUSSIAN_LINF.radius(0.9, 0.25)


def test_the_sigma2_floor_only_adds_noise():
    w = torch.zeros(2, 1, 16, 16)
    assert torch.all(step2_sigma(w, 1.0, 3, 3 * 256) == SIGMA2_FLOOR)
    x, m1, m2 = torch.rand(2, 1, 16, 16), torch.rand(2, 1, 16, 16), torch.rand(2, 1, 16, 16)
    assert torch.allclose(combine(m1, m2, w, 1.0, step2_sigma(w, 1.0, 1, 256)), m1)
    assert x.shape == m1.shape


def test_bad_settings_are_refused():
    for f in (0.0, 1.0, -0.5, 1.5):
        with pytest.raises(ConfigError, match="first_query_budget_frac"):
            query_sigmas(0.5, f)
    with pytest.raises(ConfigError, match="divisible|multiples of 8"):
        MaskUNet(input_shape=(3, 60, 64))
    with pytest.raises(ConfigError, match="16"):
        MaskUNet(input_shape=(1, 8, 8))
    with pytest.raises(ConfigError, match="method.mode"):
        build_mask("adaptive", (1, 16, 16))


def test_mask_unet_shape_and_range():
    net = MaskUNet(input_shape=(3, 48, 32), width=4).eval()
    w = net(torch.randn(2, 3, 48, 32))
    assert w.shape == (2, 1, 48, 32) and bool(((w > 0) & (w < 1)).all())


def lenet_pipeline(mode: str, shape=(1, 16, 16), sigma: float = 0.5) -> AdaptiveSmoothing:
    torch.manual_seed(0)
    classifier = build_classifier(LeNet(input_shape=shape, num_classes=3), None, None)
    return AdaptiveSmoothing(
        classifier, sigma=sigma, input_shape=shape, mode=mode, mask=build_mask(mode, shape, 4)
    ).eval()


@pytest.mark.parametrize(
    ("mode", "shape"), [("ars", (1, 16, 16)), ("static", (1, 16, 16)), ("ars", (3, 16, 16))]
)
def test_certify_around_the_pipeline_is_batch_independent_and_linf_only(mode, shape):
    """The engine draws the pipeline's noise from the per-input streams: any batch size gives the same
    counts. The pipeline certifies L∞ only, at its own σ, with d = C·H·W (768 for RGB: a radius over H·W
    only would be √3 too large)."""
    pipeline = lenet_pipeline(mode, shape)
    xs = torch.rand(3, *shape)
    spec = CertificationSpec(sigma=0.5, n0=20, n=300, batch_size=64, norm="linf")
    a = certify_batch(pipeline, xs, [4, 9, 2], spec, num_classes=3)
    b = certify_batch(
        pipeline, xs, [4, 9, 2], CertificationSpec(**{**spec.as_dict(), "batch_size": 7}), num_classes=3
    )
    assert np.array_equal(a.counts, b.counts) and np.array_equal(a.radius, b.radius)
    d = shape[0] * 256
    expected = np.where(a.predict >= 0, 0.5 * norm.ppf(np.clip(a.pa_lower, 0.5, 1)) / math.sqrt(d), 0.0)
    assert np.allclose(a.radius, expected)
    with pytest.raises(ConfigError, match="norm"):
        certify_batch(pipeline, xs, [0, 1, 2], CertificationSpec(sigma=0.5, n0=20, n=300), num_classes=3)
    with pytest.raises(ValueError, match="sigma"):
        certify_batch(
            pipeline, xs, [0, 1, 2], CertificationSpec(**{**spec.as_dict(), "sigma": 0.25}), num_classes=3
        )


def test_the_pipeline_refuses_inputs_of_another_shape():
    """σ₂ is calibrated to the d the pipeline was built for; on smaller inputs the accounting would
    overstate the radius (by √2.5 for 32×32 inputs into a 64×64 pipeline), so they are refused."""
    pipeline = lenet_pipeline("ars", (1, 32, 32))
    spec = CertificationSpec(sigma=0.5, n0=10, n=20, batch_size=10, norm="linf")
    with pytest.raises(ValueError, match="built for inputs"):
        certify_batch(pipeline, torch.rand(1, 1, 16, 16), [0], spec, num_classes=3)


def test_iss_decline_in_linf_units_is_checked():
    """ISS's absolute decline is in the radius's units: the L2 default 0.05 exceeds every certifiable L∞
    radius (≈ 0.03 here), which would plan zero draws and abstain everywhere; it is refused, and a decline
    in L∞ units works."""
    pipeline = lenet_pipeline("ars", (1, 32, 32))
    xs = torch.rand(2, 1, 32, 32)
    spec = CertificationSpec(sigma=0.5, n=400, batch_size=200, norm="linf", sampling="iss")
    with pytest.raises(ConfigError, match="iss.max_decline"):
        certify_batch(pipeline, xs, [0, 1], spec, num_classes=3)
    iss = {"decline": "ad", "max_decline": 0.005}
    ok = CertificationSpec(sigma=0.5, n=400, batch_size=200, norm="linf", sampling="iss", sampler=iss)
    result = certify_batch(pipeline, xs, [0, 1], ok, num_classes=3)
    assert (result.n > 0).any()


def test_smooth_takes_the_norm():
    """Cohen's three-line API certifies a pipeline with norm="linf" (and refuses it without)."""
    from rs_lightning.smoothing import Smooth

    pipeline = lenet_pipeline("ars")
    label, radius = Smooth(pipeline, 3, 0.5, norm="linf").certify(torch.rand(1, 16, 16), 10, 100, 0.1, 50)
    assert label == Smooth.ABSTAIN or 0 <= radius <= 0.5 * norm.ppf(0.1 ** (1 / 100)) / 16 + 1e-9
    with pytest.raises(ConfigError, match="norm"):
        Smooth(pipeline, 3, 0.5).certify(torch.rand(1, 16, 16), 10, 100, 0.1, 50)


class LearnedMask(nn.Module):
    """A learnable per-pixel mask (B copies of one (1, 1, H, W) parameter), ignoring m1."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight)

    def forward(self, m1):
        return self.weight.expand(m1.shape[0], -1, -1, -1)


def test_the_gradient_reaches_the_mask_through_every_path():
    """ARS src/train.py: with reparameterized noise the loss reaches the mask through m₂ = w⊙x, through
    σ₂(‖w‖) and through the averaging weights. Autograd must equal a central finite difference (float64) of
    the same fixed-noise loss along a random direction; detaching σ₂ (a plausible bug that still trains)
    changes the directional derivative by far more than the finite-difference error, which is checked too."""
    torch.manual_seed(5)
    sigma, shape = 0.5, (1, 8, 8)
    weight = torch.rand(1, 1, 8, 8, dtype=torch.float64) * 0.8 + 0.1
    pipeline = AdaptiveSmoothing(
        Identity(), sigma=sigma, input_shape=shape, mode="ars", mask=LearnedMask(weight.clone())
    )
    x = torch.rand(4, *shape, dtype=torch.float64)
    noise = torch.randn(4, 2, *shape, dtype=torch.float64)
    r = torch.randn(4, *shape, dtype=torch.float64)
    direction = torch.randn_like(weight)

    def loss(w: torch.Tensor) -> torch.Tensor:
        pipeline.mask.weight.data.copy_(w)
        return (pipeline(x, noise) * r).sum()

    h = 1e-6
    numeric = (float(loss(weight + h * direction)) - float(loss(weight - h * direction))) / (2 * h)
    pipeline.mask.weight.data.copy_(weight)
    pipeline.mask.weight.grad = None
    (pipeline(x, noise) * r).sum().backward()
    autograd = float((pipeline.mask.weight.grad * direction).sum())
    assert autograd == pytest.approx(numeric, rel=1e-6, abs=1e-8)

    s1, s2_base = query_sigmas(sigma, 0.5)
    w = weight.clone().requires_grad_(True)
    wb = w.expand(4, -1, -1, -1)
    s2 = step2_sigma(wb.detach(), s2_base, 1, 64)  # the bug: no gradient through sigma_2
    m1 = x + s1 * noise[:, 0]
    detached = (combine(m1, wb * x + s2 * noise[:, 1], wb, s1, s2) * r).sum()
    (grad,) = torch.autograd.grad(detached, w)
    assert abs(float((grad * direction).sum()) - numeric) > 1e3 * abs(autograd - numeric) + 1e-6
