"""Data modules: shapes, ranges, splits, augmentation, readers and the missing-data messages."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from PIL import Image

from rs_lightning.data import (
    CIFAR10DataModule,
    DatasetNotFoundError,
    DigitsDataModule,
    FashionMNISTDataModule,
    ImageNetDataModule,
    MNISTDataModule,
    NpzDataModule,
    RSDataModule,
    read_idx,
)
from rs_lightning.data.quantize import first_off_grid

CONF = Path(__file__).resolve().parents[2] / "conf" / "data"
DEBIAN_FMNIST = Path("/usr/share/datasets/fashion-mnist")


def _stack(ds, n: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    items = [ds[i] for i in range(len(ds) if n is None else n)]
    return torch.stack([x for x, _ in items]), torch.tensor([y for _, y in items])


# ---------------------------------------------------------------- digits


def test_digits_shapes_ranges_and_interface():
    dm = DigitsDataModule(batch_size=64)
    dm.prepare_data()
    dm.setup("fit")
    first = dm.dataset("train")
    dm.setup("validate")  # idempotent: no reload
    assert dm.dataset("train") is first
    assert (len(dm.dataset("train")), len(dm.dataset("test"))) == (1437, 360)
    assert (dm.num_classes, dm.input_shape, dm.mean, dm.std) == (10, (1, 8, 8), None, None)
    assert dm.class_names == [str(i) for i in range(10)]
    x, y = _stack(dm.dataset("test"))
    assert x.dtype == torch.float32 and x.shape == (360, 1, 8, 8)
    assert x.min() >= 0 and x.max() == 1.0 and torch.all((x * 16).round() == x * 16)
    assert isinstance(dm.dataset("test")[0][1], int) and set(y.tolist()) == set(range(10))
    xb, yb = next(iter(dm.train_dataloader()))
    assert xb.shape == (64, 1, 8, 8) and yb.dtype == torch.int64
    xv, yv = next(iter(dm.val_dataloader()))  # the test split, unshuffled
    torch.testing.assert_close(xv, x[:64])
    assert torch.equal(yv, y[:64])
    desc = dm.describe()
    json.dumps(desc)
    assert desc["name"] == "digits" and desc["splits"] == {"train": 1437, "test": 360}
    with pytest.raises(ValueError, match="train, test"):
        dm.dataset("val")


def test_digits_split_is_stratified():
    dm = DigitsDataModule()
    _, y_train = _stack(dm.dataset("train"))
    _, y_test = _stack(dm.dataset("test"))
    total = np.bincount(y_train.numpy(), minlength=10) + np.bincount(y_test.numpy(), minlength=10)
    expected_test = total * 360 / total.sum()
    assert np.all(np.abs(np.bincount(y_test.numpy(), minlength=10) - expected_test) <= 1)


def test_digits_split_is_deterministic():
    a, b, c = DigitsDataModule(), DigitsDataModule(), DigitsDataModule(split_seed=1)
    xa, ya = _stack(a.dataset("test"))
    xb, yb = _stack(b.dataset("test"))
    xc, _ = _stack(c.dataset("test"))
    assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert not torch.equal(xa, xc)


# ---------------------------------------------------------------- npz


def _write_npz(path: Path, shape: tuple[int, ...], n_train=20, n_test=6, **extra) -> dict:
    rng = np.random.default_rng(0)
    arrays = {
        "x_train": rng.integers(0, 256, (n_train, *shape), dtype=np.uint8),
        "y_train": rng.integers(0, 3, n_train).astype(np.uint8),
        "x_test": rng.integers(0, 256, (n_test, *shape), dtype=np.uint8),
        "y_test": np.array([4] + [0] * (n_test - 1), dtype=np.uint8),
    }
    arrays.update(extra)
    np.savez(path, **arrays)
    return arrays


def test_npz_gray(tmp_path):
    arrays = _write_npz(tmp_path / "g.npz", (10, 12), y_test=np.array([2] + [0] * 5, dtype=np.uint8))
    dm = NpzDataModule(str(tmp_path / "g.npz"), batch_size=8)
    dm.setup()
    assert dm.input_shape == (1, 10, 12) and dm.num_classes == 3  # max training label 2 + 1
    assert dm.class_names == ["0", "1", "2"] and dm.mean is None
    x, y = dm.dataset("test")[0]
    assert x.dtype == torch.float32 and y == 2
    torch.testing.assert_close(x[0], torch.from_numpy(arrays["x_test"][0]).float() / 255)
    assert len(dm.describe()["sha256"]) == 64


def test_which_modules_serve_8_bit_inputs(tmp_path):
    """``eight_bit`` (lattice noise by default) agrees with the data: an npz's test inputs are on the grid
    k/255, the digits' (v/16) are not; the uint8 datasets say so, ImageNet's resized crops do not. Catches a
    module that claims the grid and would have every default run refused, or the reverse."""
    _write_npz(tmp_path / "g.npz", (10, 12), y_test=np.zeros(6, dtype=np.uint8))
    npz = NpzDataModule(str(tmp_path / "g.npz"), batch_size=8)
    npz.setup()
    digits = DigitsDataModule()
    digits.setup()
    assert npz.eight_bit and first_off_grid(npz.dataset("test"), range(5)) is None
    assert not digits.eight_bit and first_off_grid(digits.dataset("test"), range(5)) is not None
    assert MNISTDataModule.eight_bit and FashionMNISTDataModule.eight_bit and CIFAR10DataModule.eight_bit
    assert not ImageNetDataModule.eight_bit and not RSDataModule.eight_bit


def test_npz_rgb_augment_and_names(tmp_path):
    names = np.array(["a", "b", "c", "d", "e", "f"])
    arrays = _write_npz(tmp_path / "c.npz", (8, 8, 3), class_names=names)
    dm = NpzDataModule(str(tmp_path / "c.npz"), mean=[0.5] * 3, std=[0.25] * 3, augment=True)
    dm.setup()
    assert dm.input_shape == (3, 8, 8) and dm.mean == (0.5, 0.5, 0.5) and dm.std == (0.25,) * 3
    assert dm.class_names == list(names) and dm.num_classes == 6
    x, _ = dm.dataset("test")[1]  # HWC -> CHW, no augmentation on test
    torch.testing.assert_close(x, torch.from_numpy(arrays["x_test"][1]).permute(2, 0, 1).float() / 255)
    torch.manual_seed(0)
    augmented = [dm.dataset("train")[0][0] for _ in range(8)]
    assert all(a.shape == (3, 8, 8) for a in augmented)
    assert any(not torch.equal(a, augmented[0]) for a in augmented)
    override = NpzDataModule(str(tmp_path / "c.npz"), class_names=list("uvwxyz"))
    override.setup()
    assert override.class_names == list("uvwxyz")


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"drop": "y_test"}, "y_test"),
        ({"x_train": np.zeros((20, 4, 4), np.float32)}, "x_train must be uint8"),
        ({"y_test": np.zeros(5, np.uint8)}, "y_test has 5 labels"),
        ({"x_test": np.zeros((6, 5, 5), np.uint8)}, "x_test"),
    ],
)
def test_npz_validation(tmp_path, change, match):
    rng = np.random.default_rng(0)
    arrays = {
        "x_train": rng.integers(0, 256, (20, 4, 4), dtype=np.uint8),
        "y_train": np.zeros(20, np.uint8),
        "x_test": rng.integers(0, 256, (6, 4, 4), dtype=np.uint8),
        "y_test": np.zeros(6, np.uint8),
    }
    arrays.pop(change.pop("drop", ""), None)
    arrays.update(change)
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match=match):
        NpzDataModule(str(tmp_path / "bad.npz")).setup()


def test_npz_mean_length_and_missing_file(tmp_path):
    _write_npz(tmp_path / "g.npz", (4, 4))
    with pytest.raises(ValueError, match="data.mean must be 1 value"):
        NpzDataModule(str(tmp_path / "g.npz"), mean=[0.1, 0.2], std=[1, 1]).setup()
    with pytest.raises(DatasetNotFoundError, match="data.path="):
        NpzDataModule(str(tmp_path / "nope.npz")).setup()


def test_npz_real_mnist(shared_data):
    path = shared_data / "mnist.npz"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    dm = NpzDataModule(str(path))
    dm.setup()
    train = dm.dataset("train")
    assert (len(train), len(dm.dataset("test")), dm.input_shape, dm.num_classes) == (
        60000,
        10000,
        (1, 28, 28),
        10,
    )
    assert [train[i][1] for i in range(5)] == [5, 0, 4, 1, 9]
    assert dm.dataset("test")[0][1] == 7
    assert train.images.float().mean().item() / 255 == pytest.approx(0.1307, abs=1e-4)
    assert train.images.dtype == torch.uint8  # kept compact in memory


# ---------------------------------------------------------------- MNIST / Fashion-MNIST


def test_idx_reader(tmp_path, idx_writer):
    arr = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    np.testing.assert_array_equal(read_idx(idx_writer(tmp_path / "a.gz", arr)), arr)
    np.testing.assert_array_equal(read_idx(idx_writer(tmp_path / "a", arr)), arr)
    (tmp_path / "bad").write_bytes(b"\x00\x00\x0d\x01" + (3).to_bytes(4, "big") + bytes(12))
    with pytest.raises(ValueError, match="not a uint8 IDX"):
        read_idx(tmp_path / "bad")


def test_fashion_mnist_debian_reader(tmp_path, mnist_like_writer):
    arrays = mnist_like_writer(tmp_path / "deb", n_train=12, n_test=5)
    dm = FashionMNISTDataModule(root=str(tmp_path / "none"), debian_dir=str(tmp_path / "deb"))
    dm.setup()
    assert (len(dm.dataset("train")), len(dm.dataset("test"))) == (12, 5)
    assert dm.class_names[0] == "T-shirt/top" and dm.num_classes == 10 and dm.input_shape == (1, 28, 28)
    x, y = dm.dataset("test")[3]
    torch.testing.assert_close(x[0], torch.from_numpy(arrays["t10k-images-idx3-ubyte"][3]).float() / 255)
    assert y == int(arrays["t10k-labels-idx1-ubyte"][3])
    assert dm.describe()["source"] == str(tmp_path / "deb")


@pytest.mark.skipif(not DEBIAN_FMNIST.is_dir(), reason="needs `apt-get install dataset-fashion-mnist`")
def test_fashion_mnist_debian_package(tmp_path):
    dm = FashionMNISTDataModule(root=str(tmp_path))
    dm.setup()
    train, test = dm.dataset("train"), dm.dataset("test")
    assert (len(train), len(test)) == (60000, 10000)
    assert torch.bincount(train.labels).tolist() == [6000] * 10
    assert torch.bincount(test.labels).tolist() == [1000] * 10
    assert test[0][1] == 9  # first test image: ankle boot


def test_mnist_torchvision_layout(tmp_path, mnist_like_writer):
    arrays = mnist_like_writer(tmp_path / "MNIST" / "raw", gz=False)
    dm = MNISTDataModule(root=str(tmp_path))
    dm.setup()
    x, y = dm.dataset("train")[2]
    torch.testing.assert_close(x[0], torch.from_numpy(arrays["train-images-idx3-ubyte"][2]).float() / 255)
    assert y == int(arrays["train-labels-idx1-ubyte"][2]) and dm.mean is None


# ---------------------------------------------------------------- missing data


@pytest.mark.parametrize(
    ("make", "needles"),
    [
        (lambda r: MNISTDataModule(root=r), ["MNIST/raw", "data.download=true"]),
        (
            lambda r: FashionMNISTDataModule(root=r, debian_dir=f"{r}/deb"),
            ["FashionMNIST/raw", "/deb", "apt-get install dataset-fashion-mnist", "data.download=true"],
        ),
        (lambda r: CIFAR10DataModule(root=r), ["cifar-10-batches-py", "data.download=true"]),
        (lambda r: ImageNetDataModule(root=r), ["val", "data.root=/path/to/imagenet with train/ and val/"]),
    ],
    ids=["mnist", "fashion_mnist", "cifar10", "imagenet"],
)
def test_missing_data_message(tmp_path, make, needles):
    dm = make(str(tmp_path))
    dm.prepare_data()  # download=False: nothing to do, no error yet
    with pytest.raises(DatasetNotFoundError) as err:
        dm.setup("fit")
    assert isinstance(err.value, FileNotFoundError)
    assert str(tmp_path.resolve()) in str(err.value)
    for needle in needles:
        assert needle in str(err.value)


# ---------------------------------------------------------------- ImageNet (ImageFolder)


def _image_folder(root: Path, classes: list[str], per_class: int = 2) -> None:
    rng = np.random.default_rng(0)
    for c in classes:
        (root / c).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, (30 + 7 * i, 40, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / c / f"{i}.png")


def test_imagenet_image_folder(tmp_path):
    classes = ["n02", "n01", "n03"]
    _image_folder(tmp_path / "train", classes)
    _image_folder(tmp_path / "val", classes)
    dm = ImageNetDataModule(root=str(tmp_path), batch_size=4)
    dm.setup()
    assert dm.class_names == sorted(classes) and dm.num_classes == 3
    assert dm.input_shape == (3, 224, 224) and dm.mean == (0.485, 0.456, 0.406)
    for split in ("train", "test"):
        x, y = dm.dataset(split)[5]
        assert x.shape == (3, 224, 224) and x.dtype == torch.float32 and 0 <= x.min() <= x.max() <= 1
        assert y == 2
    xb, _ = next(iter(dm.val_dataloader()))
    assert xb.shape == (4, 3, 224, 224)
    assert dm.describe()["splits"] == {"test": 6, "train": 6}


def test_imagenet_val_only(tmp_path):
    _image_folder(tmp_path / "val", ["a", "b"], per_class=1)
    dm = ImageNetDataModule(root=str(tmp_path))
    assert len(dm.dataset("test")) == 2
    with pytest.raises(DatasetNotFoundError, match="'train' is not available"):
        dm.dataset("train")


# ---------------------------------------------------------------- configs


@pytest.mark.parametrize(
    ("name", "cls", "workers"),
    [
        ("digits", DigitsDataModule, 0),
        ("mnist", MNISTDataModule, 0),
        ("fashion_mnist", FashionMNISTDataModule, 0),
        ("cifar10", CIFAR10DataModule, 4),
        ("imagenet", ImageNetDataModule, 4),
        ("npz", NpzDataModule, 0),
    ],
)
def test_data_configs_instantiate(name, cls, workers):
    cfg = OmegaConf.create({"optim": {"batch_size": 32}, "data": OmegaConf.load(CONF / f"{name}.yaml")})
    assert OmegaConf.to_container(cfg.data)["batch_size"] == "${oc.select:optim.batch_size,256}"
    if name == "npz":
        assert OmegaConf.is_missing(cfg.data, "path")
        cfg.data.path = "some.npz"
    dm = instantiate(cfg.data)  # constructing never touches the disk
    assert isinstance(dm, cls) and isinstance(dm, RSDataModule)
    assert (dm.batch_size, dm.val_batch_size, dm.num_workers) == (32, 32, workers)


# ---------------------------------------------------------------- the training shuffle


def test_the_training_shuffle_is_torchs_and_replays_the_rest_of_a_pass():
    """Catches: a shuffle that changed every existing run's data order (each pass must draw its seed from
    the global RNG as torch's RandomSampler does, so the same global seed gives the same batches), a
    replay that skips the wrong number of indices or draws a seed (the global RNG, restored by the
    checkpoint, must not move), and a replay that sticks to later passes (each must draw its own seed)."""
    from torch.utils.data import RandomSampler

    from rs_lightning.data.base import EpochShuffle

    data = list(range(50))
    torch.manual_seed(3)
    plain = [list(RandomSampler(data)) for _ in range(2)]
    torch.manual_seed(3)
    shuffle = EpochShuffle(data)
    first = list(shuffle)
    seed = shuffle.pass_seed
    assert [first, list(shuffle)] == plain and plain[0] != plain[1]
    shuffle.replay(seed, 17)
    before = torch.random.get_rng_state()
    assert list(shuffle) == plain[0][17:]
    assert torch.equal(torch.random.get_rng_state(), before)
    assert list(shuffle) != plain[0][17:] and sorted(list(shuffle)) == data


def test_the_mid_epoch_position_round_trips_and_refuses_a_changed_batch_size():
    """Catches: a data position lost between save and load, a malformed one accepted, and a resume that
    would replay the epoch with another batch size (the skipped count would be wrong)."""
    dm = DigitsDataModule(batch_size=64)
    assert dm.state_dict() == {}  # outside a fit: nothing to record
    dm.load_state_dict({"train_pass_seed": 5, "train_batches_done": 3, "train_batch_size": 64})
    loader = dm.train_dataloader()
    expected = list(torch.randperm(len(dm.dataset("train")), generator=torch.Generator().manual_seed(5)))
    assert list(loader.sampler) == [int(i) for i in expected[3 * 64 :]]
    assert len(list(dm.train_dataloader().sampler)) == len(dm.dataset("train"))  # the replay is used once
    with pytest.raises(ValueError, match="data.batch_size=32 is invalid"):
        DigitsDataModule(batch_size=32).load_state_dict(
            {"train_pass_seed": 5, "train_batches_done": 3, "train_batch_size": 64}
        )
    with pytest.raises(ValueError, match="not three integers"):
        dm.load_state_dict({"train_pass_seed": "5", "train_batches_done": 3, "train_batch_size": 64})
