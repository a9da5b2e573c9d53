"""Certifying a checkpoint at another σ than its training one changes nothing of the checkpoint's model:
planning builds the model at the spec's σ (``at_sigma``) instead of setting it in place."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from rs_testing import certify_config, train_config, write_quadrant_npz
from scipy.stats import norm

import rs_lightning.cli.certify as certify_module
from rs_lightning.certification import execute
from rs_lightning.cli.certify import plan_run
from rs_lightning.cli.train import train


def tiny16(path):
    return write_quadrant_npz(path, train=32, test=12)


def test_an_ars_checkpoint_certified_at_another_sigma_is_left_as_it_was(tmp_path, monkeypatch):
    """Catches planning that sets the loaded pipeline's sigma (or any attribute or weight) in place, and a
    run at sigma=0.5 whose noise or radii are still those of the training sigma 0.25."""
    data = tiny16(tmp_path / "tiny16.npz")
    overrides = [
        "method=ars",
        "data=npz",
        f"data.path={data}",
        "model=lenet",
        "optim.max_epochs=1",
        "optim.batch_size=16",
        "trainer.limit_train_batches=1",
        "method.mask_width=4",
        "~callbacks.certification",
    ]
    checkpoint = train(train_config(tmp_path / "train", overrides))["checkpoint"]
    loaded = []
    real = certify_module.classifier_from_checkpoint

    def remember(*args, **kwargs):
        model = real(*args, **kwargs)
        state = {k: v.clone() for k, v in model.state_dict().items()}
        loaded.append((model, state, {k: v for k, v in vars(model).items() if not k.startswith("_")}))
        return model

    monkeypatch.setattr(certify_module, "classifier_from_checkpoint", remember)
    config = certify_config(tmp_path / "cert", checkpoint, ["sigma=0.5", "override_sigma=true", "n=100"])
    plan = plan_run(config)
    ((model, state, attributes),) = loaded
    assert plan.spec.sigma == 0.5 and plan.model.sigma == 0.5 and plan.record.sigma_overridden
    assert plan.model is not model and model.sigma == 0.25
    execute(plan)
    assert {k: v for k, v in vars(model).items() if not k.startswith("_")} == attributes
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    rows = pd.read_csv(tmp_path / "cert" / "certify.tsv", sep="\t")
    certified = rows["predict"] >= 0
    assert np.allclose(rows["radius"][certified], 0.5 * norm.ppf(rows["pA_lower"][certified]) / 16, atol=1e-6)
