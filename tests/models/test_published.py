"""Loading the published repositories' checkpoints (the ``torch.save`` of each repository's training script):
synthetic files in each repository's exact layout give the logits of the network
that wrote them."""

from __future__ import annotations

import copy
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from torch import nn
from torchvision.models import resnet50 as tv_resnet50

from rs_lightning.models import CIFARResNet, LeNet
from rs_lightning.models.checkpoint import CheckpointError
from rs_lightning.models.published import ARCHITECTURES, FORMATS, load_published
from rs_lightning.validation import ConfigError

CONF = Path(__file__).resolve().parents[2] / "conf" / "model"
CIFAR10 = ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))
CIFAR100 = ((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761))
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
COHEN_DERIVED = tuple(f for f in FORMATS if f != "macer")


class PlainTensorNormalize(nn.Module):
    """Like the repositories' NormalizeLayer/InputCenterLayer: means/sds are plain attributes, not buffers,
    so the saved state dict has no ``0.`` keys (locuslab/smoothing code/datasets.py)."""

    def __init__(self, means, sds=None):
        super().__init__()
        self.means = torch.tensor(means)
        self.sds = None if sds is None else torch.tensor(sds)

    def forward(self, x):
        x = x - self.means.view(1, -1, 1, 1)
        return x if self.sds is None else x / self.sds.view(1, -1, 1, 1)


def randomize(net: nn.Module, seed: int = 0) -> nn.Module:
    """Random weights and non-trivial BatchNorm statistics, so eval-mode logits depend on every tensor."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in net.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.weight.copy_(0.5 + torch.rand(module.weight.shape, generator=gen))
                module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=gen))
                module.running_mean.copy_(0.1 * torch.randn(module.running_mean.shape, generator=gen))
                module.running_var.copy_(0.5 + torch.rand(module.running_var.shape, generator=gen))
                module.num_batches_tracked.fill_(7)
    return net.eval()


def sgd_state(model: nn.Module, step: bool = True) -> dict:
    """``optimizer.state_dict()`` of the repositories' SGD (momentum buffers after one step)."""
    model = copy.deepcopy(model)  # the step must not change the weights the test compares against
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    if step:
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        opt.step()
    return opt.state_dict()


def cohen_file(wrapped: nn.Sequential, arch: str, epoch: int = 90) -> dict:
    """``torch.save({'epoch', 'arch', 'state_dict', 'optimizer'})`` of the Cohen-derived train scripts."""
    return {
        "epoch": epoch,
        "arch": arch,
        "state_dict": wrapped.state_dict(),
        "optimizer": sgd_state(wrapped, step=arch != "resnet50"),
    }


def macer_file(net: nn.Module, epoch: int = 440) -> dict:
    """RuntianZ/macer main.py: ``{'net': base_model.state_dict(), 'epoch'}`` (no normalization, no arch)."""
    return {"net": net.state_dict(), "epoch": epoch}


def save(obj, path: Path, legacy: bool = False) -> Path:
    torch.save(obj, path, _use_new_zipfile_serialization=not legacy)
    return path


def resnet20(num_classes: int = 10, seed: int = 0) -> CIFARResNet:
    torch.manual_seed(seed)
    return randomize(CIFARResNet(input_shape=(3, 32, 32), num_classes=num_classes, depth=20), seed)


def lenet(seed: int = 0) -> LeNet:
    torch.manual_seed(seed)
    return LeNet(input_shape=(1, 28, 28), num_classes=10).eval()


def logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(x)


def assert_same_logits(model, reference, shape, seed=1):
    x = torch.rand((2, *shape), generator=torch.Generator().manual_seed(seed))
    assert not model.training
    torch.testing.assert_close(logits(model, x), logits(reference, x), rtol=0, atol=1e-5)


# (format, arch, network, (mean, std) of the file's NormalizeLayer or None, num_classes, legacy .tar format)
CASES = [
    ("cohen", "cifar_resnet20", resnet20, CIFAR10, 10, True),  # 2019 files: pre-1.6 serialization
    ("smoothadv", "cifar_resnet110", resnet20, CIFAR10, 10, False),  # depth from model_cfg below
    ("consistency", "lenet", lenet, None, 10, False),  # MNIST: nn.Identity as layer 0
    ("consistency", "cifar_resnet20", resnet20, CIFAR10, 10, False),
    ("smoothmix", "cifar_resnet20", resnet20, CIFAR10, 10, False),
    ("catrs", "cifar100_resnet110", lambda: resnet20(100), CIFAR100, 100, False),  # depth from model_cfg
    ("catrs", "lenet", lenet, None, 10, False),
]


@pytest.mark.parametrize(("fmt", "arch", "make", "norm", "num_classes", "legacy"), CASES)
def test_cohen_derived_layouts_give_the_same_logits(tmp_path, fmt, arch, make, norm, num_classes, legacy):
    """Cohen's train.py: Sequential(NormalizeLayer, net) saved as {epoch, arch, state_dict, optimizer}."""
    net = make()
    layer0 = nn.Identity() if norm is None else PlainTensorNormalize(*norm)
    wrapped = nn.Sequential(layer0, net).eval()
    assert all(k.startswith("1.") for k in wrapped.state_dict())
    path = save(cohen_file(wrapped, arch), tmp_path / "checkpoint.pth.tar", legacy)
    shape = tuple(net.conv1.weight.shape[1:2]) + ((28, 28) if isinstance(net, LeNet) else (32, 32))
    model_cfg = {"_target_": "rs_lightning.models.cifar_resnet.CIFARResNet", "depth": 20}
    cfg = model_cfg if arch.endswith("resnet110") else None  # a small stand-in for the 110-layer file
    mean, std = norm if norm is not None else (None, None)
    model, meta = load_published(path, fmt, cfg, shape, num_classes, mean, std)
    assert_same_logits(model, wrapped, shape)
    assert meta.sigma is None and meta.checkpoint_format == fmt and meta.arch == arch
    assert meta.num_classes == num_classes and meta.input_shape == list(shape)
    assert meta.model == (cfg or ARCHITECTURES[arch]) and meta.epoch == 90
    assert meta.mean == (None if norm is None else list(norm[0]))
    assert meta.normalization == ("identity" if norm is None else "normalize")


def test_smoothadv_input_center_layer(tmp_path):
    """SmoothAdv's InputCenterLayer (x - mean) for its ImageNet / from-scratch CIFAR models (README)."""
    net = resnet20()
    wrapped = nn.Sequential(PlainTensorNormalize(CIFAR10[0]), net).eval()
    path = save(cohen_file(wrapped, "cifar_resnet20"), tmp_path / "checkpoint.pth.tar")
    model, meta = load_published(path, "smoothadv", None, (3, 32, 32), 10, *CIFAR10, normalization="center")
    assert_same_logits(model, wrapped, (3, 32, 32))
    assert meta.normalization == "center" and meta.std == [1.0, 1.0, 1.0]
    default, _ = load_published(path, "smoothadv", None, (3, 32, 32), 10, *CIFAR10)
    x = torch.rand(2, 3, 32, 32)
    assert not torch.allclose(logits(default, x), logits(wrapped, x), atol=1e-3)  # wrong layer: other net


def test_imagenet_resnet50_dataparallel_layout(tmp_path):
    """ImageNet: Sequential(NormalizeLayer, DataParallel(torchvision resnet50)) -> keys '1.module.'."""
    torch.manual_seed(0)
    net = randomize(tv_resnet50(weights=None, num_classes=10))
    wrapped = nn.Sequential(PlainTensorNormalize(*IMAGENET), nn.DataParallel(net)).eval()
    assert next(iter(wrapped.state_dict())).startswith("1.module.")
    path = save(cohen_file(wrapped, "resnet50"), tmp_path / "checkpoint.pth.tar")
    model, meta = load_published(path, "cohen", None, (3, 64, 64), 10, *IMAGENET)
    assert_same_logits(model, nn.Sequential(PlainTensorNormalize(*IMAGENET), net).eval(), (3, 64, 64))
    assert meta.model == {"_target_": "rs_lightning.models.imagenet.ResNet50"}


@pytest.mark.parametrize(
    ("make", "shape", "arch"),
    [(resnet20, (3, 32, 32), "cifar_resnet20"), (lenet, (1, 28, 28), "lenet")],
    ids=["resnet", "lenet"],
)
def test_macer_layout_without_normalization(tmp_path, make, shape, arch):
    """MACER: {'net': bare state dict, 'epoch'}, no arch (recognized from the keys), no normalization."""
    net = make()
    path = save(macer_file(net), tmp_path / "440.pth")
    mean, std = CIFAR10 if shape[0] == 3 else (None, None)  # the dataset's, ignored: MACER reads raw [0,1]
    model, meta = load_published(path, "macer", None, shape, 10, mean, std)
    assert_same_logits(model, net, shape)
    assert meta.arch == arch and meta.normalization == "identity" and meta.mean is None
    assert meta.epoch == 440 and meta.sigma is None


def test_model_cfg_from_hydra_config_overrides_the_arch(tmp_path):
    net = resnet20()
    wrapped = nn.Sequential(PlainTensorNormalize(*CIFAR10), net).eval()
    path = save(cohen_file(wrapped, "my_own_resnet"), tmp_path / "checkpoint.pth.tar")
    with pytest.raises(CheckpointError, match="arch='my_own_resnet'.*model_cfg"):
        load_published(path, "cohen", None, (3, 32, 32), 10, *CIFAR10)
    cfg = OmegaConf.load(CONF / "cifar_resnet20.yaml")
    model, meta = load_published(path, "cohen", cfg, (3, 32, 32), 10, *CIFAR10)
    assert_same_logits(model, wrapped, (3, 32, 32))
    assert meta.model == {"_target_": "rs_lightning.models.cifar_resnet.CIFARResNet", "depth": 20}
    with pytest.raises(CheckpointError, match="not a registered model"):
        load_published(path, "cohen", {"_target_": "os.system"}, (3, 32, 32), 10, *CIFAR10)


def bearpaw_names(depth: int) -> list[str]:
    """Parameter/buffer names of bearpaw's CIFAR ResNet (locuslab/smoothing code/archs/cifar_resnet.py)."""
    bn = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
    names = ["conv1.weight", *(f"bn1.{b}" for b in bn)]
    for stage in (1, 2, 3):
        for i in range((depth - 2) // 6):
            p = f"layer{stage}.{i}."
            names += [p + "conv1.weight", *(p + f"bn1.{b}" for b in bn)]
            names += [p + "conv2.weight", *(p + f"bn2.{b}" for b in bn)]
            if stage > 1 and i == 0:
                names += [p + "downsample.0.weight", *(p + f"downsample.1.{b}" for b in bn)]
    return [*names, "fc.weight", "fc.bias"]


def test_project_names_match_the_published_networks():
    """No name mapping is needed: CIFARResNet, LeNet and resnet50 use the published parameter names."""
    assert list(resnet20().state_dict()) == bearpaw_names(20)
    shapes = {k: tuple(v.shape) for k, v in lenet().state_dict().items()}
    assert shapes == {
        "conv1.weight": (20, 1, 5, 5),
        "conv1.bias": (20,),
        "conv2.weight": (50, 20, 5, 5),
        "conv2.bias": (50,),
        "fc1.weight": (500, 800),
        "fc1.bias": (500,),
        "fc2.weight": (10, 500),
        "fc2.bias": (10,),
    }
    assert ARCHITECTURES["resnet50"]["_target_"] == "rs_lightning.models.imagenet.ResNet50"  # torchvision's


def cifar_file(tmp_path: Path, edit=None, num_classes: int = 10) -> Path:
    ckpt = cohen_file(nn.Sequential(PlainTensorNormalize(*CIFAR10), resnet20(num_classes)), "cifar_resnet20")
    if edit is not None:
        edit(ckpt["state_dict"])
    return save(ckpt, tmp_path / "checkpoint.pth.tar")


def one_line_error(path, fmt="cohen", num_classes=10, **kwargs) -> str:
    with pytest.raises(CheckpointError) as info:
        load_published(path, fmt, None, (3, 32, 32), num_classes, *CIFAR10, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_and_renamed_keys_are_listed(tmp_path):
    def edit(state):
        del state["1.layer2.0.bn1.weight"]
        state["1.classifier.weight"] = state.pop("1.fc.weight")

    message = one_line_error(cifar_file(tmp_path, edit))
    assert "missing 2 key(s): layer2.0.bn1.weight, fc.weight" in message
    assert "unexpected 1 key(s): classifier.weight" in message
    assert "CIFARResNet(depth=20)" in message


def test_wrong_shapes_are_listed(tmp_path):
    message = one_line_error(cifar_file(tmp_path, num_classes=100), num_classes=10)
    assert (
        "wrong shape(s): fc.weight expected (10, 64) found (100, 64), fc.bias expected (10,) found (100,)"
        in (message)
    )


RAN: list[str] = []


def _mark(what: str) -> None:
    RAN.append(what)


class Payload:
    """Unpickling it would call ``_mark``: code in a checkpoint."""

    def __reduce__(self):
        return (_mark, ("code ran",))


def test_pickled_code_is_refused(tmp_path):
    path = tmp_path / "checkpoint.pth.tar"
    torch.save({"arch": "cifar_resnet20", "state_dict": OrderedDict(), "hook": Payload()}, path)
    message = one_line_error(path)
    assert "weights_only=True refuses" in message and "_mark" in message and not RAN


def test_format_and_layout_errors(tmp_path):
    with pytest.raises(ConfigError, match="checkpoint_format='locuslab' is invalid.*one of cohen, smoothadv"):
        load_published(tmp_path / "x.pth", "locuslab", None, (3, 32, 32), 10, *CIFAR10)
    macer = save(macer_file(resnet20()), tmp_path / "440.pth")
    assert "checkpoint_format=macer" in one_line_error(macer, "cohen")
    cohen = cifar_file(tmp_path)
    assert "Cohen-derived" in one_line_error(cohen, "macer")
    bare = save({"arch": "cifar_resnet20", "state_dict": resnet20().state_dict()}, tmp_path / "bare.pth")
    assert "'1.<layer>'" in one_line_error(bare, "consistency")
    assert "does not exist" in one_line_error(tmp_path / "none.pth")
    with pytest.raises(ConfigError, match="normalization="):
        load_published(cohen, "cohen", None, (3, 32, 32), 10, *CIFAR10, normalization="standardize")
    densenet = save(
        {**torch.load(cohen, weights_only=True), "arch": "cifar_densenet40"}, tmp_path / "densenet.pth"
    )
    assert "arch='cifar_densenet40'" in one_line_error(densenet, "consistency")


def test_normalization_stored_in_the_file_wins(tmp_path):
    """A NormalizeLayer whose means/sds were buffers (0.means, 0.sds) is used instead of the dataset's."""
    mean, std = (0.3, 0.4, 0.5), (0.25, 0.5, 0.75)
    wrapped = nn.Sequential(PlainTensorNormalize(mean, std), resnet20()).eval()
    ckpt = cohen_file(wrapped, "cifar_resnet20")
    ckpt["state_dict"] = OrderedDict(
        [("0.means", torch.tensor(mean)), ("0.sds", torch.tensor(std)), *ckpt["state_dict"].items()]
    )
    path = save(ckpt, tmp_path / "checkpoint.pth.tar")
    model, meta = load_published(path, "smoothmix", None, (3, 32, 32), 10, *CIFAR10)
    assert_same_logits(model, wrapped, (3, 32, 32))
    assert meta.mean == pytest.approx(mean) and meta.std == pytest.approx(std)


def test_old_files_without_num_batches_tracked_load_and_nan_is_refused(tmp_path):
    def drop(state):
        for key in [k for k in state if k.endswith("num_batches_tracked")]:
            del state[key]

    net = resnet20()
    model, _ = load_published(cifar_file(tmp_path, drop), "cohen", None, (3, 32, 32), 10, *CIFAR10)
    assert_same_logits(model, nn.Sequential(PlainTensorNormalize(*CIFAR10), net).eval(), (3, 32, 32))

    def poison(state):
        state["1.fc.bias"][0] = float("nan")

    assert "non-finite" in one_line_error(cifar_file(tmp_path, poison))


# ------------------------------------------------- against an independent functional reference forward
def random_bearpaw_state(depth: int, in_channels: int = 3, num_classes: int = 10, seed: int = 0) -> dict:
    """A state dict in the layout of bearpaw's CIFAR ResNet (locuslab/smoothing
    ``code/archs/cifar_resnet.py``), built from the tensor shapes alone (not from this project's module):
    random weights and non-trivial BatchNorm statistics."""
    gen = torch.Generator().manual_seed(seed)
    state: dict[str, torch.Tensor] = {}

    def conv(name, out_c, in_c, k):
        std = (2.0 / (k * k * out_c)) ** 0.5
        state[f"{name}.weight"] = std * torch.randn((out_c, in_c, k, k), generator=gen)

    def bn(name, c):
        state[f"{name}.weight"] = 0.5 + torch.rand(c, generator=gen)
        state[f"{name}.bias"] = 0.2 * torch.randn(c, generator=gen)
        state[f"{name}.running_mean"] = 0.2 * torch.randn(c, generator=gen)
        state[f"{name}.running_var"] = 0.5 + torch.rand(c, generator=gen)
        state[f"{name}.num_batches_tracked"] = torch.tensor(7)

    conv("conv1", 16, in_channels, 3)
    bn("bn1", 16)
    inplanes = 16
    for stage, planes in ((1, 16), (2, 32), (3, 64)):
        for i in range((depth - 2) // 6):
            p = f"layer{stage}.{i}"
            conv(f"{p}.conv1", planes, inplanes, 3)
            bn(f"{p}.bn1", planes)
            conv(f"{p}.conv2", planes, planes, 3)
            bn(f"{p}.bn2", planes)
            if inplanes != planes:
                conv(f"{p}.downsample.0", planes, inplanes, 1)
                bn(f"{p}.downsample.1", planes)
            inplanes = planes
    state["fc.weight"] = 0.1 * torch.randn((num_classes, 64), generator=gen)
    state["fc.bias"] = 0.1 * torch.randn(num_classes, generator=gen)
    return state


def reference_resnet_forward(w: dict, x: torch.Tensor, depth: int) -> torch.Tensor:
    """The published CIFAR ResNet in eval mode, written with torch.nn.functional over the state dict:
    stem conv3x3-BN-ReLU; BasicBlock = conv3x3(stride)-BN-ReLU-conv3x3-BN plus the identity or the
    1x1-conv(stride)-BN shortcut, then ReLU; stride 2 in the first block of stages 2 and 3; AvgPool2d(8) on
    the 8x8 map; FC."""

    def bn(t, name):
        mean, var = w[f"{name}.running_mean"], w[f"{name}.running_var"]
        return F.batch_norm(t, mean, var, w[f"{name}.weight"], w[f"{name}.bias"], training=False, eps=1e-5)

    def conv(t, name, stride=1, padding=1):
        return F.conv2d(t, w[f"{name}.weight"], stride=stride, padding=padding)

    out = F.relu(bn(conv(x, "conv1"), "bn1"))
    for stage in (1, 2, 3):
        for i in range((depth - 2) // 6):
            p, stride = f"layer{stage}.{i}", 2 if stage > 1 and i == 0 else 1
            branch = bn(
                conv(F.relu(bn(conv(out, f"{p}.conv1", stride), f"{p}.bn1")), f"{p}.conv2"), f"{p}.bn2"
            )
            shortcut = out
            if f"{p}.downsample.0.weight" in w:
                shortcut = bn(conv(out, f"{p}.downsample.0", stride, padding=0), f"{p}.downsample.1")
            out = F.relu(branch + shortcut)
    pooled = F.avg_pool2d(out, 8).flatten(1)
    return F.linear(pooled, w["fc.weight"], w["fc.bias"])


def random_lenet_state(num_classes: int = 10, seed: int = 0) -> dict:
    """A state dict of the repositories' MNIST LeNet: conv1 1->20 5x5, conv2 20->50 5x5, fc1 800->500, fc2."""
    gen = torch.Generator().manual_seed(seed)
    shapes = {"conv1": (20, 1, 5, 5), "conv2": (50, 20, 5, 5), "fc1": (500, 800), "fc2": (num_classes, 500)}
    state = {}
    for name, shape in shapes.items():
        fan_in = int(torch.tensor(shape[1:]).prod())
        state[f"{name}.weight"] = torch.randn(shape, generator=gen) * (2.0 / fan_in) ** 0.5
        state[f"{name}.bias"] = 0.1 * torch.randn(shape[0], generator=gen)
    return state


def reference_lenet_forward(w: dict, x: torch.Tensor) -> torch.Tensor:
    """The published LeNet: conv5x5-ReLU-maxpool2, conv5x5-ReLU-maxpool2, flatten, FC-ReLU, FC."""
    out = F.max_pool2d(F.relu(F.conv2d(x, w["conv1.weight"], w["conv1.bias"])), 2, 2)
    out = F.max_pool2d(F.relu(F.conv2d(out, w["conv2.weight"], w["conv2.bias"])), 2, 2)
    out = F.relu(F.linear(out.flatten(1), w["fc1.weight"], w["fc1.bias"]))
    return F.linear(out, w["fc2.weight"], w["fc2.bias"])


def published_file(state: dict, fmt: str, arch: str | None) -> dict:
    """A bare network state dict in ``fmt``'s layout: MACER's ``{'net', 'epoch'}``, or the Cohen-derived
    ``{'epoch', 'arch', 'state_dict'}`` of ``Sequential(NormalizeLayer, net)`` (plain-tensor means/sds: no
    ``0.`` keys, the network under ``1.``)."""
    if fmt == "macer":
        return {"net": dict(state), "epoch": 440}
    return {"epoch": 90, "arch": arch, "state_dict": {f"1.{k}": v for k, v in state.items()}}


@pytest.mark.parametrize(
    ("fmt", "depth", "arch", "model_cfg"),
    [
        ("cohen", 20, "cifar_resnet20", None),  # the arch string of the file, NormalizeLayer in front
        (
            "cohen",
            14,
            "cifar_resnet110",
            {"_target_": "rs_lightning.models.cifar_resnet.CIFARResNet", "depth": 14},
        ),
        ("macer", 8, None, None),  # depth recognized from the keys (n = 1), no normalization
    ],
    ids=["cohen-arch", "cohen-model_cfg", "macer-inferred"],
)
def test_loaded_resnet_matches_an_independent_functional_forward_of_the_published_architecture(
    tmp_path, fmt, depth, arch, model_cfg
):
    """The logits of a loaded file equal those of the reference architecture computed with
    torch.nn.functional straight from the file's tensors, not from this project's CIFARResNet.

    Exists to catch the one-line mutation ``return self.relu(out + residual)`` -> ``return out + residual``
    in ``BasicBlock.forward`` (rs_lightning/models/cifar_resnet.py), and any other one-line change of the
    architecture, which the loader tests above cannot see: they compare CIFARResNet with itself."""
    w = random_bearpaw_state(depth, seed=depth)
    path = save(published_file(w, fmt, arch), tmp_path / "checkpoint.pth")
    model, meta = load_published(path, fmt, model_cfg, (3, 32, 32), 10, *CIFAR10)
    assert meta.model["depth"] == depth
    x = torch.rand((3, 3, 32, 32), generator=torch.Generator().manual_seed(5))
    if fmt == "macer":  # MACER's network reads raw [0, 1] inputs
        normalized = x
    else:  # the Cohen-derived NormalizeLayer with the dataset's mean and std
        mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in CIFAR10)
        normalized = (x - mean) / std
    expected = reference_resnet_forward(w, normalized, depth)
    assert expected.abs().max() > 0.1 and expected.std() > 0.01  # logits that depend on the input
    torch.testing.assert_close(logits(model, x), expected)


@pytest.mark.parametrize("fmt", ["consistency", "macer"])
def test_loaded_lenet_matches_an_independent_functional_forward_of_the_published_architecture(tmp_path, fmt):
    """MNIST LeNet (smoothing-consistency ``code/archs/lenet.py``, MACER ``model.py``), no normalization.

    Exists to catch a one-line mutation of ``LeNet.forward`` (rs_lightning/models/lenet.py), e.g. dropping
    the ReLU after fc1 (``self.fc2(self.fc1(x.flatten(1)))``), which the self-comparing loader tests let
    through."""
    w = random_lenet_state()
    path = save(published_file(w, fmt, "lenet"), tmp_path / "checkpoint.pth")
    model, meta = load_published(path, fmt, None, (1, 28, 28), 10, None, None)
    assert meta.arch == "lenet" and meta.normalization == "identity"
    x = torch.rand((3, 1, 28, 28), generator=torch.Generator().manual_seed(6))
    torch.testing.assert_close(logits(model, x), reference_lenet_forward(w, x))
