"""Architectures and the normalization layer (locuslab/smoothing code/archs/, code/datasets.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from torch import nn

from rs_lightning.models import MLP, CIFARResNet, DigitsCNN, LeNet, Normalize, ResNet50, build_classifier

CONF = Path(__file__).resolve().parents[2] / "conf" / "model"
CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    ("make", "shape"),
    [
        (lambda s, k: DigitsCNN(input_shape=s, num_classes=k), (1, 8, 8)),
        (lambda s, k: MLP(input_shape=s, num_classes=k), (1, 8, 8)),
        (lambda s, k: MLP(input_shape=s, num_classes=k, hidden=()), (3, 5, 4)),
        (lambda s, k: LeNet(input_shape=s, num_classes=k), (1, 28, 28)),
        (lambda s, k: CIFARResNet(input_shape=s, num_classes=k, depth=20), (3, 32, 32)),
        (lambda s, k: ResNet50(input_shape=s, num_classes=k), (3, 64, 64)),
    ],
    ids=["digits_cnn", "mlp", "linear", "lenet", "resnet20", "resnet50"],
)
def test_output_shape(make, shape):
    torch.manual_seed(0)
    net = make(shape, 7).eval()
    batch = 1 if shape[-1] == 64 else 3
    with torch.no_grad():
        out = net(torch.rand(batch, *shape))
    assert out.shape == (batch, 7)
    assert torch.isfinite(out).all()


def test_lenet_matches_reference_topology():
    net = LeNet(input_shape=(1, 28, 28), num_classes=10)
    assert net.fc1.in_features == 800 and net.fc1.out_features == 500
    assert (net.conv1.in_channels, net.conv1.out_channels, net.conv1.kernel_size) == (1, 20, (5, 5))
    assert (net.conv2.out_channels, net.fc2.out_features) == (50, 10)
    with pytest.raises(ValueError, match="H, W >= 16"):
        LeNet(input_shape=(1, 8, 8), num_classes=10)


def test_cifar_resnet_sizes_and_init():
    r20 = CIFARResNet(input_shape=(3, 32, 32), num_classes=10, depth=20)
    r110 = CIFARResNet(input_shape=(3, 32, 32), num_classes=10, depth=110)
    assert n_params(r20) == pytest.approx(0.27e6, rel=0.02)
    assert n_params(r110) == pytest.approx(1.7e6, rel=0.03)
    assert [len(r110.layer1), len(r110.layer2), len(r110.layer3)] == [18, 18, 18]
    assert r110.layer1[0].downsample is None and r110.layer2[0].downsample is not None
    assert r110.layer2[0].conv1.stride == (2, 2)
    conv = r110.layer3[5].conv2.weight  # 64 * 64 * 9 weights ~ N(0, 2 / (9 * 64))
    assert conv.std().item() == pytest.approx(math.sqrt(2 / (9 * 64)), rel=0.05)
    assert torch.all(r110.bn1.weight == 1) and torch.all(r110.bn1.bias == 0)
    with torch.no_grad():
        assert r110.eval()(torch.rand(2, 3, 32, 32)).shape == (2, 10)


@pytest.mark.parametrize("depth", [21, 4, 0])
def test_cifar_resnet_bad_depth(depth):
    with pytest.raises(ValueError, match=f"depth={depth}"):
        CIFARResNet(input_shape=(3, 32, 32), num_classes=10, depth=depth)


def test_normalize_math():
    x = torch.rand(4, 3, 5, 6)
    mean, std = torch.tensor(CIFAR_MEAN), torch.tensor(CIFAR_STD)
    expected = (x - mean[None, :, None, None]) / std[None, :, None, None]
    layer = Normalize(CIFAR_MEAN, CIFAR_STD)
    torch.testing.assert_close(layer(x), expected)
    assert layer.mean.shape == (1, 3, 1, 1) and set(layer.state_dict()) == {"mean", "std"}
    ident = Normalize()
    assert ident(x) is x and ident.state_dict() == {}


@pytest.mark.parametrize(
    ("mean", "std", "match"),
    [((0.5,), None, "both"), ((0.5, 0.5), (0.2,), "one value per channel"), ((0.5,), (0.0,), "> 0")],
)
def test_normalize_rejects_bad_args(mean, std, match):
    with pytest.raises(ValueError, match=match):
        Normalize(mean, std)


def test_state_dict_round_trip(tmp_path):
    torch.manual_seed(0)
    model = build_classifier(
        CIFARResNet(input_shape=(3, 32, 32), num_classes=10, depth=20), CIFAR_MEAN, CIFAR_STD
    )
    assert isinstance(model[0], Normalize) and "0.mean" in model.state_dict()
    assert "1.conv1.weight" in model.state_dict()  # Cohen's checkpoint layout
    torch.save(model.state_dict(), tmp_path / "m.pt")
    torch.manual_seed(1)
    fresh = build_classifier(
        CIFARResNet(input_shape=(3, 32, 32), num_classes=10, depth=20), (0, 0, 0), (1, 1, 1)
    )
    fresh.load_state_dict(torch.load(tmp_path / "m.pt", weights_only=True))
    torch.testing.assert_close(fresh[0].std.flatten(), torch.tensor(CIFAR_STD))
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(fresh.eval()(x), model.eval()(x))
    # identity normalization round-trips too, and refuses a normalized checkpoint
    ident = build_classifier(LeNet(input_shape=(1, 28, 28), num_classes=10), None, None)
    torch.save(ident.state_dict(), tmp_path / "i.pt")
    ident.load_state_dict(torch.load(tmp_path / "i.pt", weights_only=True))
    with pytest.raises(RuntimeError, match="Unexpected key"):
        ident.load_state_dict({**ident.state_dict(), "0.mean": torch.zeros(1, 1, 1, 1)})


@pytest.mark.parametrize(
    ("name", "shape", "cls"),
    [
        ("digits_cnn", (1, 8, 8), DigitsCNN),
        ("mlp", (1, 8, 8), MLP),
        ("lenet", (1, 28, 28), LeNet),
        ("cifar_resnet20", (3, 32, 32), CIFARResNet),
        ("cifar_resnet110", (3, 32, 32), CIFARResNet),
        ("resnet50", (3, 64, 64), ResNet50),
    ],
)
def test_model_configs_instantiate(name, shape, cls):
    cfg = OmegaConf.load(CONF / f"{name}.yaml")
    assert "input_shape" not in cfg and "num_classes" not in cfg
    net = instantiate(cfg, input_shape=shape, num_classes=5)  # Hydra passes these as ListConfig/int
    assert isinstance(net, cls)
    with torch.no_grad():
        assert net.eval()(torch.rand(1, *shape)).shape == (1, 5)
