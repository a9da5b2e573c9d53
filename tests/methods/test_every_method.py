"""What every training method must do, one parametrized test each (the methods' own files test their math):
a few optimizer steps on real data lower the loss, and ``train.py method=<name> debug=fast_dev_run`` runs and
logs the method's loss components."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rs_testing import REPO, compose_config, train_config

from rs_lightning.cli.train import build_method, train
from rs_lightning.data import DigitsDataModule

# E_ds = 0 so that discard, reweight and the sphere attack act from the first step; tau = 0 keeps every input.
ACR_GAMING = {"ds_epoch": 0, "discard_threshold": 0.0, "discard_samples": 4, "num_noise_vec": 2}
# method -> (overrides that keep 30 steps on 32 digits quick, scalars its training step logs)
METHODS = {
    "gaussian": ([], set()),
    "clean": ([], set()),
    "consistency": (
        ["method.num_noise_vec=2", "method.lbd=10"],
        {"train/consistency_ce", "train/consistency_kl", "train/consistency_entropy"},
    ),
    "macer": (
        ["method.num_noise_vec=4", "method.lbd=2"],
        {"train/macer_classification", "train/macer_robustness", "train/macer_active"},
    ),
    "smoothadv": (["method.num_steps=2", "method.num_noise_vec=2", "method.warmup=1"], {"train/epsilon"}),
    "smoothmix": (["method.num_steps=2", "method.warmup=1"], set()),
    "catrs": (
        ["method.allow_onehot=true", "method.num_noise_vec=2", "method.num_steps=2", "method.epsilon=0.25"],
        {"train/catrs_low", "train/catrs_high"},
    ),
    **{
        name: ([f"method.{k}={v}" for k, v in ACR_GAMING.items()], set())
        for name in ("acr_gaming", "discard_hard", "reweight", "sphere_attack")
    },
}
# The ARS pipelines need images a mask UNet can halve three times and L-infinity certification: their
# training step and checkpoint are tested on 16x16 canvases in tests/methods/test_ars_training.py.
TESTED_ELSEWHERE = {"ars", "ars_static", "denoiser", "diffusion"}  # tests/methods/test_denoiser.py
STEPS = [
    "model=mlp",
    "optim.optimizer.lr=0.1",
    "optim.scheduler=null",
]  # the digits recipe's SGD, momentum 0.9


@pytest.mark.parametrize("name", list(METHODS))
def test_training_steps_reduce_the_loss_on_digits(name):
    """Catches: a method whose loss does not reach the network's parameters (a detached term, a sign error in
    a component): on one batch of 32 digits, 30 SGD steps must cut the loss by 40 % (measured: 56-94 %)."""
    torch.manual_seed(0)
    cfg = compose_config("train", [f"method={name}", *STEPS, *METHODS[name][0]])
    data = DigitsDataModule(batch_size=32)
    data.setup("fit")
    x, y = next(iter(data.train_dataloader()))
    method = build_method(cfg, data)
    optimizer = method.configure_optimizers()
    optimizer = optimizer["optimizer"] if isinstance(optimizer, dict) else optimizer
    losses = []
    for _ in range(30):
        loss = method.training_loss(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert np.mean(losses[-3:]) < 0.6 * np.mean(losses[:3]), losses


@pytest.mark.parametrize("name", list(METHODS))
def test_config_runs_fast_dev_run_and_logs_the_components(tmp_path, name):
    overrides = [f"method={name}", *METHODS[name][0], "debug=fast_dev_run", "logger=none"]
    result = train(train_config(tmp_path, overrides))
    metrics = result["metrics"]
    assert np.isfinite(metrics["train/loss_step"])
    assert METHODS[name][1] <= set(metrics)


def test_every_method_config_is_tested():
    """Catches a method added to conf/method/ without a row here (it would go untested by these checks)."""
    configs = {path.stem for path in (REPO / "conf" / "method").glob("*.yaml")}
    assert configs == set(METHODS) | TESTED_ELSEWHERE
