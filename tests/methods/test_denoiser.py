"""Denoised smoothing (Salman et al., NeurIPS 2020): ``method=denoiser`` trains D in front of a frozen
classifier f, its checkpoint holds f∘D, and certify.py certifies f∘D with every sampler; bad classifier or
denoiser files are one-line errors before any work."""

from __future__ import annotations

import functools
import json

import pytest
import torch
import torch.nn.functional as F
from rs_testing import SMALL, assert_one_line_error, certify_config, run_script, train_config

from rs_lightning.cli.certify import certify
from rs_lightning.cli.train import train
from rs_lightning.data import DigitsDataModule
from rs_lightning.methods.denoiser import DenoiserTraining
from rs_lightning.models import MLP, build_classifier
from rs_lightning.models.checkpoint import CHECKPOINT_KEY, CheckpointError, load_classifier
from rs_lightning.models.denoisers import DenoisedClassifier, check_denoiser_output
from rs_lightning.validation import ConfigError

QUIET = ["~callbacks.certification", "logger=csv"]
SMALL_DNCNN = ["method.denoiser.depth=3", "method.denoiser.channels=8"]
DENOISER = ["method=denoiser", "optim=denoiser", "data.batch_size=64", *SMALL_DNCNN, *QUIET]


def denoiser_run(tmp_path, name, classifier, *overrides):
    overrides = [*DENOISER, f"method.classifier_checkpoint={classifier}", *overrides]
    return train(train_config(tmp_path / name, overrides))["checkpoint"]


@pytest.fixture(scope="module")
def mse_run(trained_digits, tmp_path_factory):
    """The MSE stage: a small DnCNN, 3 epochs in front of the digits fixture's classifier."""
    out = tmp_path_factory.mktemp("mse")
    return denoiser_run(out, "mse", trained_digits["checkpoint"], "optim.max_epochs=3")


def classifier_weights(path) -> dict[str, torch.Tensor]:
    state = torch.load(path, weights_only=True)["state_dict"]
    return {k: v for k, v in state.items() if k.startswith("model.")}


def test_the_mse_stage_learns_to_denoise_and_leaves_the_classifier_bit_for_bit(trained_digits, mse_run):
    """Catches: the classifier's weights or BatchNorm statistics moving (an optimizer over all parameters,
    f left in train mode), D fitted to the noisy input instead of the clean one (it stays the identity,
    whose error is sigma^2), and gradients not reaching D. On 360 test digits with fresh noise the
    identity's mean squared error is 0.0625 ± 0.0003; three epochs bring D's to about half of it."""
    before, after = classifier_weights(trained_digits["checkpoint"]), classifier_weights(mse_run)
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    model, meta = load_classifier(mse_run)
    assert isinstance(model, DenoisedClassifier) and meta.denoiser["sigma"] == meta.sigma == 0.25
    assert meta.denoiser["objective"] == "mse"
    dataset = DigitsDataModule().dataset("test")
    x = torch.stack([dataset[i][0] for i in range(len(dataset))])
    noisy = x + 0.25 * torch.randn(x.shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        error = F.mse_loss(model.denoiser(noisy), x).item()
        assert torch.equal(model(noisy), model.classifier(model.denoiser(noisy)))  # f(D(x)), in that order
    assert error < 0.7 * 0.25**2


def test_the_second_stage_starts_from_the_mse_denoiser_and_certifies_with_every_sampler(
    trained_digits, mse_run, tmp_path
):
    """Catches: a stability stage that ignores ``denoiser_checkpoint`` (it starts from the identity: the
    lr 1e-5 stage cannot move far from where it starts, so its D stays within a hair of the MSE one), a
    checkpoint certify.py cannot rebuild f∘D from, a sampler that bypasses D, and a run record that does
    not name the denoiser."""
    stage = denoiser_run(
        tmp_path,
        "stability",
        trained_digits["checkpoint"],
        "optim.max_epochs=1",
        "method.objective=stability",
        f"method.denoiser_checkpoint={mse_run}",
        "optim.optimizer.lr=1e-5",
    )
    first, second = load_classifier(mse_run)[0].denoiser, load_classifier(stage)[0].denoiser
    for a, b in zip(first.parameters(), second.parameters(), strict=True):
        assert (a - b).abs().max() < 1e-3  # from the MSE D; a fresh DnCNN's last layer is all zeros
    assert classifier_weights(stage).keys() == classifier_weights(mse_run).keys()
    assert all(torch.equal(v, classifier_weights(mse_run)[k]) for k, v in classifier_weights(stage).items())
    summaries = {}
    for sampling in ("cohen", "iss", "sequential"):
        config = certify_config(tmp_path / sampling, stage, [*SMALL, f"sampling={sampling}"])
        summaries[sampling] = certify(config)
        settings = json.loads((tmp_path / sampling / "settings.json").read_text())
        assert settings["denoiser"]["objective"] == "stability" and settings["method"] == "DenoiserTraining"
    bare = certify(certify_config(tmp_path / "bare", trained_digits["checkpoint"], SMALL))
    assert summaries["cohen"]["pa_mean"] != bare["pa_mean"]  # the draws went through D


def test_the_objectives_target_the_clean_prediction_or_the_label():
    """Catches: stability training against the label (or against f's prediction on the noisy or the
    denoised input), classification against f's prediction, and MSE against the noisy input. Labels here
    disagree with f's predictions, so each mistake changes the loss."""
    torch.manual_seed(0)
    f = build_classifier(MLP(input_shape=(1, 8, 8), num_classes=10, hidden=[16]), None, None)
    x, y = torch.rand(12, 1, 8, 8), torch.randint(0, 10, (12,))
    with torch.no_grad():
        y = torch.where(y == f(x).argmax(1), (y + 1) % 10, y)
    denoiser = {"_target_": "rs_lightning.models.denoisers.DnCNN", "depth": 3, "channels": 4}
    for objective in ("mse", "stability", "classification"):
        method = DenoiserTraining(
            model=f,
            sigma=0.25,
            optimizer=functools.partial(torch.optim.Adam),
            denoiser=denoiser,
            objective=objective,
            input_shape=(1, 8, 8),
        )
        torch.nn.init.normal_(method.denoiser.dncnn[-1].weight, std=0.1)  # D is not the identity
        state = method.noise_generator.get_state()
        loss = method.training_loss(x, y)
        method.noise_generator.set_state(state)
        denoised = method.denoiser(x + method.training_noise(x))
        target = {"mse": x, "stability": f(x).argmax(1), "classification": y}[objective]
        expected = F.mse_loss(denoised, x) if objective == "mse" else F.cross_entropy(f(denoised), target)
        assert torch.allclose(loss, expected), objective
        assert not any(p.requires_grad for p in method.model.parameters())
        assert not method.train().model.training  # f keeps its BatchNorm statistics and no dropout
        assert {id(p) for p in method.trained_parameters()} == {id(p) for p in method.denoiser.parameters()}


def test_a_denoiser_must_give_the_classifiers_input_shape():
    """Catches: a denoiser whose output f cannot read (a user's registered denoiser that halves the image)
    accepted until the first batch fails deep in f."""
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 1, 3, padding=1), torch.nn.AvgPool2d(2))
    with pytest.raises(ConfigError, match=r"method.denoiser.*input's shape \(1, 8, 8\).*gives \(1, 4, 4\)"):
        check_denoiser_output(net, (1, 8, 8), "method.denoiser")
    net.train()
    check_denoiser_output(torch.nn.Identity(), (1, 8, 8), "k")  # no parameters: still checked
    assert net.training  # the check runs in eval mode and gives the mode back


def test_bad_classifier_and_denoiser_files_are_refused(trained_digits, mse_run, tmp_path):
    """Catches, each before any training: no trained classifier at all (a denoiser in front of random
    weights), a classifier of another architecture, a denoiser of another sigma, a checkpoint without a
    denoiser as the MSE stage, and a certification at another sigma than D's without override_sigma."""
    f = trained_digits["checkpoint"]
    with pytest.raises(ConfigError, match="method.classifier_checkpoint=None.*model.weights"):
        train(train_config(tmp_path / "a", [*DENOISER, "optim.max_epochs=1"]))
    with pytest.raises(CheckpointError, match="holds a model with model=.*DigitsCNN.*this run has.*MLP"):
        denoiser_run(tmp_path, "b", f, "model=mlp")
    with pytest.raises(CheckpointError, match="trained at sigma=0.25 .* this run has sigma=0.5"):
        denoiser_run(tmp_path, "c", f, "sigma=0.5", f"method.denoiser_checkpoint={mse_run}")
    with pytest.raises(CheckpointError, match="holds no denoiser"):
        denoiser_run(tmp_path, "d", f, f"method.denoiser_checkpoint={f}")
    with pytest.raises(ConfigError, match="sigma=0.5 is invalid.*override_sigma=true"):
        certify(certify_config(tmp_path / "e", mse_run, [*SMALL, "sigma=0.5"]))
    assert not (tmp_path / "a" / "checkpoints").exists() and not (tmp_path / "e" / "certify.tsv").exists()


def test_a_checkpoint_whose_denoiser_weights_do_not_fit_its_metadata_is_refused(mse_run, tmp_path):
    """Catches: denoiser weights loaded into another architecture than the metadata names (or its
    metadata trusted to allocate), and an unregistered denoiser class built from a file."""
    checkpoint = torch.load(mse_run, weights_only=True)
    checkpoint[CHECKPOINT_KEY]["denoiser"]["model"]["channels"] = 16
    torch.save(checkpoint, tmp_path / "wider.ckpt")
    with pytest.raises(CheckpointError, match=r"denoiser.dncnn.0.weight has shape \(8, 1, 3, 3\)"):
        load_classifier(tmp_path / "wider.ckpt")
    checkpoint[CHECKPOINT_KEY]["denoiser"]["model"] = {"_target_": "os.system", "command": "true"}
    torch.save(checkpoint, tmp_path / "foreign.ckpt")
    with pytest.raises(CheckpointError, match="'os.system' is not a registered denoiser"):
        load_classifier(tmp_path / "foreign.ckpt")


def test_a_unet_denoiser_trains_and_loads(trained_digits, tmp_path):
    """The second architecture through the same method and loader (8x8 digits: two poolings)."""
    unet = ["method.denoiser._target_=rs_lightning.models.denoisers.DenoiserUNet", "+method.denoiser.width=4"]
    overrides = ["~method.denoiser.depth", "~method.denoiser.channels", *unet, "optim.max_epochs=1"]
    path = train(
        train_config(
            tmp_path,
            [
                *DENOISER[:3],
                *QUIET,
                f"method.classifier_checkpoint={trained_digits['checkpoint']}",
                *overrides,
            ],
        )
    )["checkpoint"]
    model, meta = load_classifier(path)
    assert type(model.denoiser).__name__ == "DenoiserUNet" and meta.denoiser["model"]["width"] == 4


def test_train_py_without_a_classifier_is_one_line(tmp_path):
    done = run_script("train.py", *DENOISER, f"hydra.run.dir={tmp_path}", "optim.max_epochs=1")
    assert_one_line_error(done, "method.classifier_checkpoint=None", "model.weights")
