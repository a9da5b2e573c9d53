"""certify.py checkpoint_format=…: a published repository's checkpoint certified in this project's protocol
(the layouts themselves are tested in tests/models/test_published.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rs_testing import certify_config

from rs_lightning.analysis.run_view import load_run
from rs_lightning.cli.certify import certify, published_model_and_data
from rs_lightning.cli.report.loading import method_name
from rs_lightning.models import CIFARResNet, build_classifier
from rs_lightning.validation import ConfigError

MEAN, STD = [0.4914, 0.4822, 0.4465], [0.2023, 0.1994, 0.2010]  # Cohen's CIFAR-10 NormalizeLayer


FORMATS = ["cohen", "smoothadv", "macer", "consistency", "smoothmix", "catrs"]


def published_file(tmp_path, fmt: str):
    """A CIFAR ResNet-20 saved as the repository saves it: Cohen's train.py and its descendants save the
    weights of Sequential(NormalizeLayer, net) with `arch`; MACER saves {'net', 'epoch'} without any
    normalization."""
    torch.manual_seed(0)
    net = CIFARResNet(input_shape=(3, 32, 32), num_classes=10, depth=20).eval()
    path = tmp_path / "checkpoint.pth.tar"
    if fmt == "macer":
        torch.save({"net": net.state_dict(), "epoch": 440}, path)
    else:
        state = {f"1.{k}": v for k, v in net.state_dict().items()}
        torch.save({"epoch": 90, "arch": "cifar_resnet20", "state_dict": state, "optimizer": {}}, path)
    rng = np.random.default_rng(0)
    data = tmp_path / "cifar_like.npz"
    np.savez(
        data,
        x_train=rng.integers(0, 256, (20, 32, 32, 3), dtype=np.uint8),
        y_train=np.arange(20) % 10,
        x_test=rng.integers(0, 256, (6, 32, 32, 3), dtype=np.uint8),
        y_test=np.arange(6) % 10,
    )
    data_args = ["data=npz", f"data.path={data}", f"data.mean={MEAN}", f"data.std={STD}"]
    expected = net if fmt == "macer" else build_classifier(net, MEAN, STD)
    return path, expected, data_args


@pytest.fixture
def cohen_file(tmp_path):
    return published_file(tmp_path, "cohen")


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_layout_certifies_and_is_labelled_by_its_format(tmp_path, fmt):
    path, expected, data_args = published_file(tmp_path, fmt)
    out = tmp_path / "run"
    overrides = [f"checkpoint_format={fmt}", "sigma=0.25", "n0=20", "n=100", "max=4", "batch_size=100"]
    summary = certify(certify_config(out, path, [*overrides, *data_args]))
    settings = summary["settings"]
    assert settings["checkpoint_format"] == fmt and settings["sigma"] == 0.25
    assert settings["train_sigma"] is None and summary["num_inputs"] == 4
    assert method_name(load_run(out)) == f"{fmt} (published)"
    # the certified base classifier is the published network (behind its normalization, MACER: none)
    x = torch.rand(2, 3, 32, 32)
    model, *_ = published_model_and_data(certify_config(out, path, [*overrides, *data_args]), path, "cpu")
    torch.testing.assert_close(model(x), expected(x))


def test_published_checkpoints_need_sigma_data_and_a_known_format(cohen_file, tmp_path):
    path, _, data_args = cohen_file
    with pytest.raises(ConfigError, match=r"^sigma=None .* published checkpoints do not record it"):
        certify(certify_config(tmp_path / "a", path, ["checkpoint_format=cohen", *data_args]))
    with pytest.raises(ConfigError, match=r"^data=None .* records no dataset"):
        certify(certify_config(tmp_path / "b", path, ["checkpoint_format=cohen", "sigma=0.25"]))
    with pytest.raises(
        ConfigError, match=r"^checkpoint_format='nope' is invalid: .* one of cohen, smoothadv"
    ):
        certify(certify_config(tmp_path / "c", path, ["checkpoint_format=nope", "sigma=0.25", *data_args]))
