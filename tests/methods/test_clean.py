"""method=clean: the noise-free classifier of denoised smoothing; its checkpoint records no sigma."""

from __future__ import annotations

import functools
import json

import pytest
import torch
import torch.nn.functional as F
from rs_testing import SMALL, certify_config, train_config

from rs_lightning.cli.certify import certify
from rs_lightning.cli.train import train
from rs_lightning.methods.clean import CleanTraining
from rs_lightning.models import MLP, build_classifier
from rs_lightning.models.checkpoint import load_classifier
from rs_lightning.validation import ConfigError


def test_the_loss_is_the_clean_cross_entropy_and_draws_no_noise():
    """Catches: noise added to the inputs (the loss would differ and the noise stream would move)."""
    torch.manual_seed(0)
    f = build_classifier(MLP(input_shape=(1, 8, 8), num_classes=10, hidden=[16]), None, None)
    method = CleanTraining(model=f, sigma=0.5, optimizer=functools.partial(torch.optim.SGD, lr=0.1))
    x, y = torch.rand(16, 1, 8, 8), torch.randint(0, 10, (16,))
    state = method.noise_generator.get_state()
    assert torch.equal(method.training_loss(x, y), F.cross_entropy(f(x), y))
    assert torch.equal(method.noise_generator.get_state(), state)


def test_its_checkpoint_records_no_sigma_and_certify_asks_for_one(tmp_path):
    """Catches: the run's sigma recorded as a training sigma (certify.py would then certify at it by
    default and label the run as trained at it)."""
    out = train(train_config(tmp_path / "train", ["method=clean", "optim.max_epochs=1", "logger=csv"]))
    _, meta = load_classifier(out["checkpoint"])
    assert meta.sigma is None and meta.training_method == "CleanTraining"
    with pytest.raises(ConfigError, match="sigma=None .* trained without noise .* sigma=0.25"):
        certify(certify_config(tmp_path / "a", out["checkpoint"], SMALL))
    certify(certify_config(tmp_path / "b", out["checkpoint"], [*SMALL, "sigma=0.5"]))
    settings = json.loads((tmp_path / "b" / "settings.json").read_text())
    assert settings["sigma"] == 0.5 and settings["train_sigma"] is None and not settings["sigma_overridden"]
