"""``report published`` on a run certified from an ``.npz`` data file: which published dataset it counts as.

The run records the data module's ``describe()`` (``name: npz``, ``input_shape``, ``num_classes``, ``path``);
rs_lightning.analysis.published_numbers.dataset_of recognizes a 10-class 1x28x28 file as MNIST (unverified)
and anything else not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from run_folders import write_run_folder

from rs_lightning.analysis.published_numbers import dataset_of
from rs_lightning.cli.report import main
from rs_lightning.data.npz import NpzDataModule

SIGMA, N, ALPHA = 0.25, 1000, 0.001


def npz_file(path: Path, image_shape: tuple[int, ...], num_classes: int = 10) -> Path:
    """The layout NpzDataModule reads: uint8 images (N, H, W) or (N, H, W, C), integer labels 0..K-1."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (num_classes, *image_shape), dtype=np.uint8)
    y = np.arange(num_classes)
    np.savez(path, x_train=x, y_train=y, x_test=x[:4], y_test=y[:4])
    return path


def certified_run(folder: Path, data: dict) -> Path:
    """A certify.py-like folder of 4 inputs whose settings.json records ``data`` (a ``describe()``)."""
    record = {
        "subset": {"skip": 1, "start": 0, "max": 4, "num_inputs": 4},
        "data": data,
        "checkpoint": None,
        "model": None,
    }
    n_a = [1000, 990, 700, 400]
    return write_run_folder(folder, n_a, n=N, sigma=SIGMA, alpha=ALPHA, labels=range(4), record=record)


def published_text(run: Path, out: Path, capsys) -> str:
    args = ["published", str(run), "--dataset", "mnist", "--method", "cohen", "--sigma", "0.25"]
    assert main([*args, "--out", str(out), "--allow-protocol-difference"]) == 0
    capsys.readouterr()
    return (out / "published.md").read_text()


def test_an_mnist_shaped_npz_run_counts_as_mnist_and_other_npz_runs_do_not(tmp_path, capsys):
    """A 10-class 28x28 gray .npz is compared with the MNIST cell without a dataset difference (and the output
    says it was recognized by shape, unverified); 16x16 gray, 28x28 RGB and 5-class 28x28 files are not MNIST.

    Exists to catch a one-line mutation of the .npz recognition in ``dataset_of``
    (rs_lightning/analysis/published_numbers.py, used by ``report published``), e.g. ``return dataset, ...``
    -> ``return name, ...``, ``shape == expected`` -> ``shape != expected``, or dropping ``input_shape``
    (``shape = ()``), which no other test exercises."""
    mnist = npz_file(tmp_path / "mnist_like.npz", (28, 28))
    data = NpzDataModule(path=str(mnist)).describe()
    assert data["name"] == "npz" and data["input_shape"] == [1, 28, 28] and data["num_classes"] == 10
    recognized = f"npz file {mnist} with mnist's input shape (not verified)"
    assert dataset_of(data) == ("mnist", recognized)
    text = published_text(certified_run(tmp_path / "run_mnist", data), tmp_path / "out_mnist", capsys)
    assert f"data: {recognized}" in text
    assert "**dataset differs**" not in text and "- **n differs**: ours 1000, published 100000" in text

    others = {
        "gray16": npz_file(tmp_path / "gray16.npz", (16, 16)),
        "rgb28": npz_file(tmp_path / "rgb28.npz", (28, 28, 3)),
        "five_classes": npz_file(tmp_path / "five.npz", (28, 28), num_classes=5),
    }
    for key, path in others.items():
        data = NpzDataModule(path=str(path)).describe()
        assert dataset_of(data) == ("npz", "npz"), key
        text = published_text(certified_run(tmp_path / f"run_{key}", data), tmp_path / f"out_{key}", capsys)
        assert "- **dataset differs**: ours npz, published mnist" in text, key
        assert "mnist's input shape" not in text, key


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"name": "mnist", "input_shape": [1, 28, 28], "num_classes": 10}, ("mnist", "mnist")),
        (
            {"name": "npz", "input_shape": [3, 32, 32], "num_classes": 10, "path": "c.npz"},
            ("cifar10", "npz file c.npz with cifar10's input shape (not verified)"),
        ),
        ({"name": "digits", "input_shape": [1, 8, 8], "num_classes": 10}, ("digits", "digits")),
        (None, (None, "not recorded")),
    ],
)
def test_dataset_of_other_descriptions(data, expected):
    """By name for the torchvision modules; a CIFAR-shaped .npz counts as CIFAR-10, not MNIST."""
    assert dataset_of(data) == expected
