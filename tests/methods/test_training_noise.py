"""train.py noise=gaussian|laplace|uniform: the noise a method trains with, what the checkpoint
records, what certify.py then certifies, and the refusals."""

import json
import math

import numpy as np
import pytest
import torch
from rs_testing import assert_one_line_error, certify_config, run_script, train_config
from scipy.stats import kstest, laplace, uniform

from rs_lightning.cli.certify import certify
from rs_lightning.cli.train import check_resume_matches, train
from rs_lightning.methods.consistency import Consistency
from rs_lightning.methods.gaussian import GaussianAugmentation
from rs_lightning.models import build_classifier
from rs_lightning.models.digits import DigitsCNN
from rs_lightning.validation import ConfigError

SIGMA = 0.5


def method(noise: str, cls=GaussianAugmentation, **kwargs):
    net = build_classifier(DigitsCNN(input_shape=(1, 8, 8), num_classes=10), None, None)
    return cls(
        model=net,
        sigma=SIGMA,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        noise=noise,
        **kwargs,
    )


@pytest.mark.parametrize(
    ("noise", "reference"),
    [
        ("laplace", laplace(scale=SIGMA / math.sqrt(2))),
        ("uniform", uniform(loc=-math.sqrt(3) * SIGMA, scale=2 * math.sqrt(3) * SIGMA)),
    ],
)
def test_the_training_noise_has_its_distribution_at_std_sigma(noise, reference):
    """40,000 training draws against scipy's distribution with standard deviation sigma (KS at 1e-4 and the
    std within 2%). Catches a noise drawn at scale sigma instead of its lambda (KS p ~ 0) or the Gaussian
    drawn whatever the setting."""
    draws = method(noise).training_noise(torch.zeros(400, 1, 10, 10)).flatten().numpy().astype(np.float64)
    assert kstest(draws, reference.cdf).pvalue > 1e-4
    assert draws.std() == pytest.approx(SIGMA, rel=0.02)


def test_gaussian_training_noise_is_bit_identical_to_before():
    """sigma * randn from the rank's generator, exactly as before the noise option existed."""
    a, b = method("gaussian"), method("gaussian")
    expected = SIGMA * torch.randn((3, 1, 8, 8), generator=b.noise_generator)
    assert torch.equal(a.training_noise(torch.zeros(3, 1, 8, 8)), expected)


def test_consistency_trains_with_another_noise_and_gaussian_only_methods_refuse():
    assert method("uniform", Consistency).noise == "uniform"
    assert method("gaussian", Consistency, epsilon=0.25).epsilon == 0.25
    with pytest.raises(ConfigError, match=r"method\.epsilon=0\.25 .*null with noise=uniform\. .*L2 PGD"):
        method("uniform", Consistency, epsilon=0.25)  # SmoothAdv + Consistency: an L2 attack
    from rs_lightning.methods.macer import MACER

    with pytest.raises(ConfigError, match=r"noise='laplace'.*gaussian for method MACER"):
        method("laplace", MACER)
    with pytest.raises(ConfigError, match="noise='cauchy'"):
        method("cauchy")


@pytest.fixture(scope="module")
def laplace_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("laplace_run")
    callback = ["every_n_epochs=2", "num_inputs=12", "n=200", "batch_size=200"]
    overrides = ["noise=laplace", "optim.max_epochs=2", *(f"callbacks.certification.{c}" for c in callback)]
    return out, train(train_config(out, overrides))


def test_a_checkpoint_trained_with_laplace_noise_is_certified_with_it(laplace_run, tmp_path):
    """The checkpoint records the noise; certify.py's noise=null takes it and states L1 radii, and the
    epoch-end callback certified the same (its ACR is certify.py's on the callback's inputs)."""
    from rs_lightning.callbacks import CertificationCallback

    _, result = laplace_run
    meta = torch.load(result["checkpoint"], weights_only=True)["rs_lightning"]
    assert meta["noise"] == "laplace"
    args = CertificationCallback(num_inputs=12, n=200, batch_size=200).certify_command_args(360)
    overrides = [f"{k}={v}" for k, v in args.items()] + ["batch_size=200"]
    summary = certify(certify_config(tmp_path, result["checkpoint"], overrides))
    settings = json.loads((tmp_path / "settings.json").read_text())
    assert (settings["noise"], settings["norm"], settings["train_noise"]) == ("laplace", "l1", "laplace")
    assert summary["num_inputs"] == 12 and 0 < summary["pa_mean"] < 1
    for key in ("acr", "pa_mean"):
        assert result["metrics"][f"val/{key}"] == pytest.approx(summary[key], abs=1e-6)


def test_a_resume_with_another_noise_is_refused(laplace_run):
    out, result = laplace_run
    checkpoint = torch.load(result["checkpoint"], weights_only=True)
    cfg = train_config(out, ["noise=uniform", "optim.max_epochs=2"])
    with pytest.raises(ConfigError, match=r"noise: checkpoint 'laplace', now 'uniform'"):
        check_resume_matches(cfg, checkpoint)
    del checkpoint["rs_lightning"]["noise"]  # written before the key existed: Gaussian
    gaussian = train_config(out, ["optim.max_epochs=2"])
    check_resume_matches(gaussian, checkpoint)


@pytest.mark.parametrize(
    ("overrides", "needles"),
    [
        (["method=macer", "noise=uniform"], ("noise='uniform'", "MACER")),
        (["noise=cauchy"], ("noise='cauchy'", "gaussian, gaussian_lattice, laplace, uniform")),
        (
            ["method=consistency", "noise=laplace", "method.epsilon=0.25"],
            ("method.epsilon=0.25", "null with noise=laplace", "L2 PGD"),
        ),
    ],
)
def test_train_refuses_a_noise_the_method_cannot_train_with(tmp_path, overrides, needles):
    done = run_script("train.py", *overrides, f"hydra.run.dir={tmp_path}", "optim.max_epochs=1")
    assert_one_line_error(done, *needles)
    assert not (tmp_path / "checkpoints").exists()


def test_a_callback_norm_the_training_noise_cannot_certify_is_one_error(tmp_path):
    """The callback certifies the training noise: norm=l2 with Laplace training is refused before the first
    epoch, the key named once and the pairs that have a certificate listed."""
    cfg = train_config(tmp_path, ["noise=laplace", "optim.max_epochs=1", "callbacks.certification.norm=l2"])
    with pytest.raises(ConfigError) as caught:
        train(cfg)
    assert str(caught.value).startswith("callbacks.certification.norm='l2' is invalid")
    assert "laplace+l1" in str(caught.value) and not (tmp_path / "checkpoints" / "last.ckpt").exists()
