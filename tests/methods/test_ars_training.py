"""method=ars / ars_static (ARS src/train.py): two optimizers, the mask-only stage, the static mask's
projection, and a trained checkpoint certified in L∞ through certify.py."""

from __future__ import annotations

import functools
import json
import re
import runpy
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pandas as pd
import pytest
import torch
from rs_testing import certify_config, train_config, write_quadrant_npz
from scipy.stats import norm
from torch import nn

from rs_lightning.analysis.run_view import load_run
from rs_lightning.cli.certify import certify
from rs_lightning.cli.train import train
from rs_lightning.data import NpzDataModule
from rs_lightning.methods.ars import AdaptiveRS
from rs_lightning.models import LeNet, build_classifier
from rs_lightning.models.checkpoint import load_classifier
from rs_lightning.runs import ResultFileError
from rs_lightning.validation import ConfigError

SHAPE = (1, 16, 16)


@pytest.fixture
def tiny16(tmp_path):
    """A 3-class .npz of 16x16 images whose class is the brightness of one quadrant (learnable)."""
    return write_quadrant_npz(tmp_path / "tiny16.npz", train=96, test=24)


def overrides(data, method, *extra):
    return [
        f"method={method}",
        "data=npz",
        f"data.path={data}",
        "model=lenet",
        "optim.max_epochs=1",
        "optim.batch_size=16",
        "trainer.limit_train_batches=2",
        "callbacks.certification.num_inputs=4",
        "callbacks.certification.n=16",
        *(["method.mask_width=4"] if method.startswith("ars") else []),
        *extra,
    ]


@pytest.mark.parametrize("method", ["ars", "ars_static"])
def test_a_training_step_runs_and_the_checkpoint_certifies_in_linf(tmp_path, tiny16, method, capsys):
    """train.py method=ars|ars_static writes a checkpoint whose pipeline certify.py rebuilds; norm=null
    certifies it in L∞ with r = σΦ⁻¹(pA_lower)/√d, d = 256, and records norm, d and the pipeline."""
    out = train(train_config(tmp_path / "train", overrides(tiny16, method)))
    model, meta = load_classifier(out["checkpoint"])
    assert meta.pipeline["mode"] == ("ars" if method == "ars" else "static")
    assert model.noise_draws == (2 if method == "ars" else 1)
    summary = certify(certify_config(tmp_path / "cert", out["checkpoint"], ["n=200", "skip=6"]))
    settings = json.loads((tmp_path / "cert" / "settings.json").read_text())
    assert settings["norm"] == "linf" and settings["dim"] == 256 and settings["pipeline"] == meta.pipeline
    rows = pd.read_csv(tmp_path / "cert" / "certify.tsv", sep="\t")
    certified = rows["predict"] >= 0
    expected = 0.25 * norm.ppf(rows["pA_lower"][certified]) / 16
    assert np.allclose(rows["radius"][certified], expected, atol=1e-6)
    assert summary["num_inputs"] == 4 and "0.003922" in {k[:8] for k in summary["certified_accuracy"]}
    with pytest.raises(ResultFileError, match="L-infinity only"):  # no L2 radius for a pipeline
        load_run(tmp_path / "cert").in_norm("l2")
    with pytest.raises(ConfigError, match="norm"):  # and certify.py refuses norm=l2 before any work
        certify(certify_config(tmp_path / "cert_l2", out["checkpoint"], ["n=200", "skip=6", "norm=l2"]))
    assert not (tmp_path / "cert_l2" / "certify.tsv").exists()
    # the mask figure of docs/results.md draws both kinds (the static mask is a parameter that needs grad)
    masks = runpy.run_path(str(Path(__file__).resolve().parents[2] / "scripts" / "ars_masks.py"))
    png = tmp_path / "masks.png"
    capsys.readouterr()
    assert masks["main"]([str(out["checkpoint"]), "--out", str(png), "--inputs", "2", "--skip", "5"]) == 0
    assert png.stat().st_size > 1000
    lines = capsys.readouterr().out.splitlines()  # the numbers docs/results.md quotes: mask mean (and σ₂)
    mode = {"ars": "ars", "ars_static": "static"}[method]
    assert lines[0].startswith(f"masks: {png} ({mode}, sigma "), lines
    pattern = r"idx (0|5) label \d: mask mean (0|1)\.\d{4}" + (
        r", sigma2 \d\.\d{4}" if method == "ars" else ""
    )
    assert [re.fullmatch(pattern, line) is not None for line in lines[1:]] == [True, True], lines


class BNClassifier(nn.Module):
    """A classifier with BatchNorm, to see that the frozen stage keeps its running statistics."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 14 * 14, 3)
        )

    def forward(self, x):
        return self.net(x)


def make_method(mode="ars", classifier=None, train_classifier=True, mask_lr=1e-2, sigma=0.25, **kwargs):
    torch.manual_seed(0)
    classifier = classifier or build_classifier(LeNet(input_shape=SHAPE, num_classes=3), None, None)
    return AdaptiveRS(
        mode=mode,
        mask_width=4,
        input_shape=SHAPE,
        model=classifier,
        sigma=sigma,
        optimizer=functools.partial(torch.optim.SGD, lr=0.05),
        mask_optimizer=functools.partial(torch.optim.SGD, lr=mask_lr),
        train_classifier=train_classifier,
        **kwargs,
    )


def fit(method, data, epochs=1, batches=3):
    trainer = pl.Trainer(
        max_epochs=epochs,
        limit_train_batches=batches,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(method, datamodule=data)
    return trainer


def snapshot(module: nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_both_optimizers_step_end_to_end(tiny16):
    """The loss reaches the mask through m₂, σ₂(‖w‖) and the averaging weights: one CE, two optimizers,
    and after three steps both the classifier and the mask UNet have moved."""
    method = make_method()
    before_classifier, before_mask = snapshot(method.model), snapshot(method.mask)
    trainer = fit(method, NpzDataModule(path=str(tiny16), batch_size=16))
    assert trainer.global_step == 6  # Lightning counts one step per optimizer
    after_classifier, after_mask = snapshot(method.model), snapshot(method.mask)
    assert any(not torch.equal(before_classifier[k], after_classifier[k]) for k in before_classifier)
    conv_keys = [k for k in before_mask if k.endswith("weight")]
    assert all(not torch.equal(before_mask[k], after_mask[k]) for k in conv_keys)


def test_the_mask_only_stage_freezes_the_classifier_and_its_batchnorm_statistics(tiny16):
    """train_classifier=false (the reference's --resume_mask_only): only the mask trains; the classifier's
    weights and BatchNorm running statistics stay bitwise (the reference lets the statistics drift)."""
    classifier = build_classifier(BNClassifier(), None, None)
    method = make_method(classifier=classifier, train_classifier=False)
    before_classifier, before_mask = snapshot(method.model), snapshot(method.mask)
    fit(method, NpzDataModule(path=str(tiny16), batch_size=16), epochs=2)
    after = snapshot(method.model)
    assert all(torch.equal(before_classifier[k], after[k]) for k in before_classifier)
    assert not method.model.training and method.mask.training
    assert any(not torch.equal(v, snapshot(method.mask)[k]) for k, v in before_mask.items())


def test_the_static_mask_is_clamped_to_the_unit_interval(tiny16):
    """mode=static: the learned H×W mask is projected onto [0, 1] after every step (a large LR would
    otherwise push it out), and it moves away from its all-ones start."""
    method = make_method(mode="static", mask_lr=50.0)
    fit(method, NpzDataModule(path=str(tiny16), batch_size=16))
    w = method.mask.weight.detach()
    assert float(w.min()) >= 0.0 and float(w.max()) <= 1.0 and float(w.min()) < 1.0


def test_each_optimizer_follows_its_own_schedule(tiny16):
    """Classifier StepLR(1, ×0.1) and mask StepLR(1, ×0.5), stepped once per epoch: the LRs used in epochs
    0, 1, 2 are (0.05, 0.005, 0.0005) and (0.01, 0.005, 0.0025)."""

    class Recording(AdaptiveRS):
        def on_train_epoch_start(self):
            self.seen = getattr(self, "seen", []) + [[o.param_groups[0]["lr"] for o in self.optimizers()]]

    torch.manual_seed(0)
    method = Recording(
        mode="ars",
        mask_width=4,
        input_shape=SHAPE,
        sigma=0.25,
        model=build_classifier(LeNet(input_shape=SHAPE, num_classes=3), None, None),
        optimizer=functools.partial(torch.optim.SGD, lr=0.05),
        scheduler=functools.partial(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.1),
        mask_optimizer=functools.partial(torch.optim.SGD, lr=0.01),
        mask_scheduler=functools.partial(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.5),
    )
    fit(method, NpzDataModule(path=str(tiny16), batch_size=16), epochs=3, batches=1)
    assert np.allclose(method.seen, [[0.05, 0.01], [0.005, 0.005], [0.0005, 0.0025]], rtol=1e-9)


def test_the_mask_only_stage_starts_from_a_gaussian_checkpoint(tmp_path, tiny16):
    """method.classifier_checkpoint + train_classifier=false: the ImageNet recipe's second stage keeps the
    Gaussian run's classifier exactly; a classifier of another architecture is refused in one line."""
    base = train(train_config(tmp_path / "gauss", overrides(tiny16, "gaussian")))
    gaussian, _ = load_classifier(base["checkpoint"])
    out = train(
        train_config(
            tmp_path / "mask",
            overrides(
                tiny16,
                "ars",
                "method.train_classifier=false",
                f"method.classifier_checkpoint={base['checkpoint']}",
            ),
        )
    )
    pipeline, _ = load_classifier(out["checkpoint"])
    for key, value in gaussian.state_dict().items():
        assert torch.equal(value, pipeline.classifier.state_dict()[key]), key
    method = make_method(classifier_checkpoint=base["checkpoint"])
    method.model = build_classifier(BNClassifier(), None, None)
    with pytest.raises(ValueError, match="another architecture"):
        method._load_classifier(base["checkpoint"])
    with pytest.raises(ValueError, match="sigma=0.25"):  # a classifier trained at another noise level
        make_method(sigma=0.5)._load_classifier(base["checkpoint"])


def test_bad_settings_are_refused_before_training():
    for f in (0.0, 1.0, 2.0):
        with pytest.raises(ConfigError, match="first_query_budget_frac"):
            make_method(first_query_budget_frac=f)
    with pytest.raises(ConfigError, match="method.mode"):
        make_method(mode="vanilla")


def test_the_training_callback_logs_the_norm_it_is_told(tmp_path, tiny16):
    """callbacks.certification.norm=linf logs a Gaussian baseline's radii in L-infinity (ARS's units: the
    grid steps by 1/255); norm=l2 for an ARS run is refused before the first epoch."""
    linf = overrides(tiny16, "gaussian", "callbacks.certification.norm=linf", "logger=csv")
    out = train(train_config(tmp_path / "g", linf))
    metrics = pd.read_csv(tmp_path / "g" / "csv" / "metrics.csv")
    assert "val/certified_accuracy@0.003922" in metrics.columns and out["checkpoint"]
    with pytest.raises(ConfigError, match="callbacks.certification.norm"):
        train(train_config(tmp_path / "a", overrides(tiny16, "ars", "callbacks.certification.norm=l2")))
    assert not list((tmp_path / "a").glob("checkpoints/*.ckpt"))
