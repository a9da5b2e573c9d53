"""Helpers for the data-module tests: synthetic IDX files and the shared real-data folder."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
import pytest


def write_idx(path: Path, array: np.ndarray) -> Path:
    """Write a uint8 array as an IDX file (gzipped when the name ends in .gz)."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    data = header + array.tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def write_mnist_like(
    folder: Path, n_train: int = 12, n_test: int = 5, gz: bool = True, seed: int = 0
) -> dict:
    """The four MNIST-layout IDX files with random 28x28 images; returns the arrays written."""
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, n_train, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    for name, arr in arrays.items():
        write_idx(folder / (name + (".gz" if gz else "")), arr)
    return arrays


@pytest.fixture
def idx_writer():
    """``write_idx(path, array) -> path``."""
    return write_idx


@pytest.fixture
def mnist_like_writer():
    """``write_mnist_like(folder, n_train=12, n_test=5, gz=True) -> {file stem: array}``."""
    return write_mnist_like


@pytest.fixture
def shared_data() -> Path:
    """``shared/data`` next to the repository, or ``$RS_SHARED_DATA``; skips when absent."""
    env = os.environ.get("RS_SHARED_DATA")
    folder = Path(env) if env else (Path(__file__).parents[2] / ".." / "shared" / "data").resolve()
    if not folder.is_dir():
        pytest.skip(f"shared data folder {folder} not found (set RS_SHARED_DATA=/path/to/shared/data)")
    return folder
