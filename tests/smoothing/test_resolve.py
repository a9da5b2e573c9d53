"""resolve(): a request completed by the model's facts, in one place for certify.py and the callback; and
at_sigma(): a model certified at another σ than its training one without being changed."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from rs_lightning.models import LeNet, build_classifier
from rs_lightning.models.ars import AdaptiveSmoothing, build_mask
from rs_lightning.smoothing import CertificationSpec, certify_batch
from rs_lightning.smoothing.pipeline import at_sigma, pipeline_of
from rs_lightning.smoothing.resolve import ModelFacts, default_noise, resolve
from rs_lightning.validation import ConfigError

PLAIN = ModelFacts(dim=64, train_sigma=0.25)
ARS = ModelFacts(dim=256, train_sigma=0.25, pipeline="AdaptiveSmoothing", pipeline_norms=("linf",))


def pipeline(sigma=0.25, shape=(1, 16, 16)) -> AdaptiveSmoothing:
    torch.manual_seed(0)
    classifier = build_classifier(LeNet(input_shape=shape, num_classes=3), None, None)
    return AdaptiveSmoothing(
        classifier, sigma=sigma, input_shape=shape, mode="ars", mask=build_mask("ars", shape, 4)
    ).eval()


def test_the_model_decides_what_the_request_leaves_unset():
    spec = resolve({"n": 500}, PLAIN)
    assert (spec.sigma, spec.noise, spec.norm, spec.n) == (0.25, "gaussian", "l2", 500)
    laplace = resolve({"sigma": None, "noise": None, "norm": None}, ModelFacts(64, 0.5, "laplace"))
    assert (laplace.sigma, laplace.noise, laplace.norm) == (0.5, "laplace", "l1")
    assert resolve({"noise": "uniform", "norm": "linf"}, PLAIN).certificate.norm == "linf"
    assert resolve({}, ARS).norm == "linf"  # ARS certifies nothing else
    assert resolve({"sigma": 0.5}, ModelFacts(64)).sigma == 0.5  # published, parameter-free, method=clean


def test_inputs_on_the_8_bit_grid_default_to_lattice_noise():
    """On grid inputs (8-bit data, or quantize=true) a Gaussian-trained model is certified with lattice noise
    unless a noise is given; float data, other training noises and ARS pipelines keep their own. Catches the
    default applied off the grid (every such run would be refused), to Laplace/uniform models (another law),
    or over a noise the user gave."""
    assert resolve({}, PLAIN, on_grid=True).noise == "gaussian_lattice"
    assert resolve({"norm": "linf"}, PLAIN, on_grid=True).certificate.norm == "linf"
    assert resolve({}, ModelFacts(64, 0.25, "gaussian_lattice")).noise == "gaussian_lattice"
    assert resolve({}, PLAIN).noise == "gaussian"
    assert resolve({"noise": "gaussian"}, PLAIN, on_grid=True).noise == "gaussian"
    assert resolve({}, ModelFacts(64, 0.5, "laplace"), on_grid=True).noise == "laplace"
    assert resolve({}, ARS, on_grid=True).noise == "gaussian"
    assert default_noise("uniform", True) == "uniform" and default_noise("gaussian", True, "X") == "gaussian"


def test_another_sigma_needs_the_override_and_none_at_all_is_refused():
    with pytest.raises(ConfigError, match=r"^sigma=0.5 is invalid.*override_sigma=true"):
        resolve({"sigma": 0.5}, PLAIN)
    assert resolve({"sigma": 0.5}, PLAIN, override_sigma=True).sigma == 0.5
    assert resolve({"sigma": 0.25}, PLAIN).sigma == 0.25
    with pytest.raises(ConfigError, match=r"^sigma=None .* trained without noise .* sigma=0.25"):
        resolve({}, ModelFacts(64))


def test_what_the_pipeline_cannot_certify_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"^norm='l2' is invalid: norm must be linf for a Adaptive"):
        resolve({"norm": "l2"}, ARS)
    with pytest.raises(ConfigError, match=r"^callbacks\.certification\.noise='laplace'"):
        resolve({"noise": "laplace"}, ARS, prefix="callbacks.certification.")
    with pytest.raises(ConfigError, match=r"^callbacks\.certification\.alpha=2"):
        resolve({"alpha": 2}, PLAIN, prefix="callbacks.certification.")


def test_the_samplers_settings_are_resolved_at_sigma_and_d():
    """Catches a resolve that leaves the sequential grid unset or does not check ISS's decline in the
    radius's units (the L2 default exceeds every certifiable L∞ radius at d = 256)."""
    spec = resolve({"n": 2000, "sampling": "sequential"}, PLAIN)
    assert spec.sampler.radii is not None and spec.sampler.radii[0] == 0
    with pytest.raises(ConfigError, match="iss.max_decline"):
        resolve({"n": 400, "sampling": "iss"}, ARS)
    facts = ModelFacts.of(pipeline(), 256, train_sigma=0.25)
    assert facts == ARS and ModelFacts.of(nn.Linear(2, 2), 2) == ModelFacts(2)


def test_at_sigma_certifies_a_copy_and_leaves_the_model_as_it_is():
    """Catches planning that sets the pipeline's sigma in place (the checkpoint's model would then be another
    one after certification) and a copy that does not share the weights."""
    model = pipeline(0.25)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert at_sigma(model, 0.25) is model
    moved = at_sigma(model, 0.5)
    assert moved is not model and moved.sigma == 0.5 and model.sigma == 0.25
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert all(a is b for a, b in zip(moved.parameters(), model.parameters(), strict=True))
    spec = CertificationSpec(sigma=0.5, n0=10, n=50, batch_size=50, norm="linf")
    xs = torch.rand(2, 1, 16, 16)
    result = certify_batch(moved, xs, [0, 1], spec, num_classes=3)
    expected = 0.5 * torch.distributions.Normal(0, 1).icdf(torch.tensor(result.pa_lower)) / math.sqrt(256)
    certified = result.predict >= 0
    assert torch.allclose(torch.tensor(result.radius[certified]), expected[certified].double())
    with pytest.raises(ValueError, match="sigma"):  # the engine still refuses the model at its own sigma
        certify_batch(model, xs, [0, 1], spec, num_classes=3)
    assert model.sigma == 0.25 and pipeline_of(model) is model


class Denoiser(nn.Module):
    """A module that computes with the σ of its inputs, as a diffusion denoiser does."""

    follows_sigma = True

    def __init__(self, sigma):
        super().__init__()
        self.sigma, self.scale = sigma, nn.Parameter(torch.ones(1))

    def forward(self, x):
        return x * self.scale / self.sigma


def test_at_sigma_reaches_a_module_inside_the_model():
    model = nn.Sequential(Denoiser(0.25), nn.Flatten(), nn.Linear(4, 2))
    moved = at_sigma(model, 1.0)
    assert moved[0].sigma == 1.0 and model[0].sigma == 0.25
    assert moved[2] is model[2] and moved[0].scale is model[0].scale
    x = torch.ones(1, 1, 2, 2)
    assert torch.equal(moved[0](x), x) and torch.equal(model[0](x), 4 * x)
