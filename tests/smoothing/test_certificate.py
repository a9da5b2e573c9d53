"""The certificate types (rs_lightning/smoothing/certificate.py: radii, caps, grids, sampling).

Radii are checked against closed forms written here from the papers (Yang et al. 2020 Table 1 / rs4a
``src/noises``; Teng, Lee & Yuan, OpenReview 2019, Thm. 1; Cohen et al., ICML 2019, Thm. 1), and on
half-spaces, where the exact p_A of each noise gives back exactly the distance to the hyperplane in the
noise's norm (the certificates are tight there): the bug this catches is a wrong scale (σ against λ) or a
norm's factor off.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.special import log_ndtr
from scipy.stats import kstest, laplace, norm, uniform

from rs_lightning.smoothing.certificate import Certificate
from rs_lightning.smoothing.noises import noise_of
from rs_lightning.validation import ConfigError

P = np.array([0.5, 0.5 + 1e-9, 0.6, 0.75, 0.9, 0.99, 0.999, 0.001 ** (1 / 100_000)])
SIGMA, DIM = 0.5, 784


@pytest.mark.parametrize(
    ("noise", "norm_", "closed_form"),
    [
        ("gaussian", "l2", lambda p: SIGMA * norm.ppf(p)),
        ("gaussian", "l1", lambda p: SIGMA * norm.ppf(p)),
        ("gaussian", "linf", lambda p: SIGMA * norm.ppf(p) / math.sqrt(DIM)),
        ("laplace", "l1", lambda p: -(SIGMA / math.sqrt(2)) * np.log(2 * (1 - p))),
        ("uniform", "l1", lambda p: 2 * math.sqrt(3) * SIGMA * (p - 0.5)),
        ("uniform", "linf", lambda p: 2 * math.sqrt(3) * SIGMA * (1 - (1.5 - p) ** (1 / DIM))),
    ],
)
def test_radii_match_their_closed_forms(noise, norm_, closed_form):
    certificate = Certificate(noise, norm_)
    np.testing.assert_allclose(certificate.radius(P, SIGMA, DIM), closed_form(P), rtol=1e-12, atol=1e-15)
    assert certificate.radius(0.5, SIGMA, DIM) == 0 and certificate.radius(0.3, SIGMA, DIM) == 0
    cap = certificate.max_radius(SIGMA, 100_000, 0.001, DIM)
    assert cap == pytest.approx(float(closed_form(0.001 ** (1 / 100_000))), rel=1e-12)


def test_the_gaussian_radii_are_bit_identical_to_the_formulas_before_the_redesign():
    """The redesign must not move a single Gaussian certificate: σΦ⁻¹(p) and σ/√d·Φ⁻¹(p) exactly as the
    engine computed them before the certificate type existed (0 below 1/2)."""
    before = lambda scale: np.where(P < 0.5, 0.0, scale * norm.ppf(np.clip(P, 0.5, 1.0)))  # noqa: E731
    np.testing.assert_array_equal(Certificate().radius(P, SIGMA), before(SIGMA))
    np.testing.assert_array_equal(
        Certificate("gaussian", "linf").radius(P, SIGMA, DIM), before(SIGMA / float(np.sqrt(DIM)))
    )


@pytest.mark.parametrize("noise", ["gaussian", "laplace", "uniform"])
def test_each_noise_is_tight_on_a_halfspace(noise):
    """f(x) = 1[x_0 > 0] at distance t from the hyperplane: the exact p_A under each noise of std σ gives
    back radius t in the noise's own norm (L1 for Laplace and uniform, L2 for Gaussian)."""
    t = np.linspace(0.01, 0.5, 20)
    lam = {"gaussian": SIGMA, "laplace": SIGMA / math.sqrt(2), "uniform": math.sqrt(3) * SIGMA}[noise]
    exact = {
        "gaussian": norm.cdf(t / lam),
        "laplace": laplace.cdf(t / lam),
        "uniform": uniform(-1, 2).cdf(t / lam),  # U[-1, 1]
    }[noise]
    own = {"gaussian": "l2", "laplace": "l1", "uniform": "l1"}[noise]
    keep = exact < 1  # uniform: beyond t = λ every draw agrees
    np.testing.assert_allclose(Certificate(noise, own).radius(exact[keep], SIGMA), t[keep], rtol=1e-9)


@pytest.mark.parametrize(
    ("noise", "dist"), [("gaussian", norm), ("laplace", laplace), ("uniform", uniform(-1, 2))]
)
def test_standard_noise_has_its_law(noise, dist):
    """200,000 draws from a seeded stream: a Kolmogorov–Smirnov test against the standard law (scale 1) and
    the variance 1 / 2 / 1/3. Catches a scale of 2 (Laplace's σ against λ) or a shifted uniform."""
    generator = torch.Generator().manual_seed(3)
    draws = noise_of(noise).sample((200_000,), generator, "cpu")
    assert kstest(draws.numpy(), dist.cdf).pvalue > 1e-4
    variance = {"gaussian": 1.0, "laplace": 2.0, "uniform": 1 / 3}[noise]
    assert draws.var().item() == pytest.approx(variance, rel=0.02)
    again = noise_of(noise).sample((200_000,), torch.Generator().manual_seed(3), "cpu")
    assert torch.equal(draws, again)


def test_pairs_without_a_certificate_are_refused_naming_the_ones_that_have_one():
    with pytest.raises(ConfigError, match=r"^norm='l2' is invalid: .*laplace.*gaussian\+l2, gaussian\+l1"):
        Certificate("laplace", "l2")
    with pytest.raises(ConfigError, match=r"^noise='cauchy' is invalid"):
        Certificate("cauchy", "l1")
    with pytest.raises(ValueError, match="dim"):
        Certificate("uniform", "linf").radius(0.9, SIGMA)


PAIRS = [
    ("gaussian", "l2"),
    ("gaussian", "l1"),
    ("gaussian", "linf"),
    ("laplace", "l1"),
    ("uniform", "l1"),
    ("uniform", "linf"),
]
INNER = np.array([0.5 + 1e-6, 0.51, 0.6, 0.75, 0.9, 0.99, 0.999, 0.9999])


@pytest.mark.parametrize(("noise", "norm_"), PAIRS)
def test_threshold_tail_and_log_forms_agree_with_the_radius(noise, norm_):
    """threshold inverts radius (what the sequential sampler's grid needs); the tail form equals the radius
    at p = 1 - q; exp(log_threshold) = threshold. Catches an inverse with the wrong scale or d."""
    c = Certificate(noise, norm_)
    radii = c.radius(INNER, SIGMA, DIM)
    np.testing.assert_allclose(c.threshold(radii, SIGMA, DIM), INNER, rtol=1e-9)
    np.testing.assert_allclose(c.radius_at_tail(1 - INNER, SIGMA, DIM), radii, rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(np.exp(c.log_threshold(radii, SIGMA, DIM)), INNER, rtol=1e-9)
    assert c.radius_at_tail(0.5, SIGMA, DIM) == 0 and c.radius_at_tail(0.7, SIGMA, DIM) == 0


def test_gaussian_tail_and_log_forms_keep_their_precision_near_one():
    """p = 1 - 1e-20 rounds to 1 in a float (radius inf); the tail form gives sigma * isf(1e-20) and the log
    form scipy's log_ndtr (the budget conversion relies on both for budgets of 10^12 and more)."""
    c = Certificate()
    assert c.radius(1 - 1e-20, SIGMA) == np.inf
    assert c.radius_at_tail(1e-20, SIGMA) == pytest.approx(SIGMA * norm.isf(1e-20), rel=1e-12)
    assert c.log_threshold(10.0, SIGMA) == pytest.approx(float(log_ndtr(10.0 / SIGMA)), rel=1e-12)


@pytest.mark.parametrize(("noise", "norm_"), PAIRS)
def test_the_radius_grid_steps_by_the_norms_step_up_to_the_cap(noise, norm_):
    """0.25 (L2, L1) or 1/255 (L∞) up to the cap; where the cap is below one such step (uniform L∞, whose
    radii are ~2λ·ln 2/d: 0.0015 here) a tenth of the cap instead, so the grid is never just [0]."""
    c = Certificate(noise, norm_)
    grid = c.radius_grid(SIGMA, 100_000, 0.001, dim=DIM)
    cap = c.max_radius(SIGMA, 100_000, 0.001, DIM)
    step = 0.25 if norm_ != "linf" else 1 / 255
    if cap < step:
        step = float(f"{cap / 10:.2g}")
        assert (noise, norm_) == ("uniform", "linf") and len(grid) >= 10
    np.testing.assert_allclose(np.diff(grid), step, rtol=1e-3)  # rounded to 6 digits (more below 1e-3)
    assert grid[0] == 0 and grid[-1] <= cap < grid[-1] + step


@pytest.mark.parametrize("noise", ["laplace", "uniform"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_noise_is_finite_and_centred(noise, dtype):
    """Drawn in float32 and cast: a bf16 uniform draw of exactly 0 (1 in 256) would give ln 0 = -inf."""
    gen = torch.Generator().manual_seed(0)
    draws = noise_of(noise).sample((200_000,), gen, "cpu", dtype)
    assert draws.dtype == dtype and torch.isfinite(draws).all()
    assert abs(draws.float().mean().item()) < 0.02


def _code_strings_and_calls(path):
    """The string constants (docstrings left out) and the dotted names of the calls in one source file."""
    import ast

    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    strings = {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    }
    calls = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return strings, calls


def test_only_the_certificate_and_the_noises_name_norms_and_invert_the_normal_cdf():
    """The contract: the norm strings and Φ⁻¹ live in rs_lightning/smoothing/certificate.py and the noise
    classes (rs_lightning/smoothing/noises/) only, so a new noise is one class and a new norm touches those.
    Catches a branch on "linf" or a norm.ppf added anywhere else in the package."""
    from rs_testing import REPO

    inverse_cdf = ("norm.ppf", "normal.ppf", "ndtri", "special.ndtri", "torch.special.ndtri", "erfinv")
    offenders = []
    for path in sorted((REPO / "rs_lightning").rglob("*.py")):
        if path.name == "certificate.py" and path.parent.name == "smoothing" or path.parent.name == "noises":
            continue
        strings, calls = _code_strings_and_calls(path)
        named = strings & {"l1", "l2", "linf"}
        inverted = {c for c in calls if c.endswith(inverse_cdf) or c.endswith(".icdf")}
        if named or inverted:
            offenders.append(f"{path.relative_to(REPO)}: {sorted(named | inverted)}")
    assert not offenders, offenders
