"""In-memory image arrays: uint8 storage, float32 [0,1] conversion one item at a time."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset
from torchvision import transforms

from rs_lightning.data.base import DataFormatError

IDX_UINT8 = 0x08


class ArrayDataset(Dataset):
    """Images (N, C, H, W) uint8 and integer labels; item ``i`` is ``(transform(x_i) / scale, int(y_i))``.

    ``transform`` acts on the uint8 CHW tensor (e.g. zero-padded crop, flip), which equals torchvision's
    PIL pipeline followed by ``ToTensor`` for ``scale=255``.
    """

    def __init__(
        self,
        images: np.ndarray | torch.Tensor,
        labels: np.ndarray | torch.Tensor,
        scale: float = 255.0,
        transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        self.images = torch.as_tensor(images)
        self.labels = torch.as_tensor(labels).long()
        if self.images.dtype != torch.uint8 or self.images.ndim != 4:
            raise ValueError(
                f"images must be uint8 (N, C, H, W), got {self.images.dtype} {tuple(self.images.shape)}"
            )
        if len(self.images) != len(self.labels):
            raise ValueError(f"{len(self.images)} images but {len(self.labels)} labels")
        self.scale = float(scale)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x = self.images[i]
        if self.transform is not None:
            x = self.transform(x)
        return x.to(torch.float32).div_(self.scale), int(self.labels[i])


def to_nchw(x: np.ndarray) -> np.ndarray:
    """(N, H, W) -> (N, 1, H, W); (N, H, W, C) -> (N, C, H, W) (contiguous)."""
    if x.ndim == 3:
        return x[:, None]
    if x.ndim == 4:
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    raise ValueError(f"images must be (N, H, W) or (N, H, W, C), got shape {x.shape}")


def crop_flip(height: int, width: int, padding: int = 4) -> transforms.Compose:
    """Zero-padded RandomCrop((H, W), padding) + RandomHorizontalFlip (Cohen's CIFAR-10 train transform)."""
    return transforms.Compose(
        [transforms.RandomCrop((height, width), padding=padding), transforms.RandomHorizontalFlip()]
    )


def read_idx(path: str | Path) -> np.ndarray:
    """Read a uint8 IDX file (LeCun's MNIST format, optionally gzipped) into a writable array."""
    path = Path(path)
    fix = "replace it with an intact copy of the dataset file"
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            buf = bytearray(f.read())
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:  # truncated or not gzip at all
        raise DataFormatError(f"{path}: damaged gzip file ({err}); {fix}") from err
    if len(buf) < 4 or buf[0] != 0 or buf[1] != 0 or buf[2] != IDX_UINT8:
        raise DataFormatError(f"{path}: not a uint8 IDX file (magic bytes {bytes(buf[:4]).hex()}); {fix}")
    ndim = buf[3]
    dims = tuple(int.from_bytes(buf[4 + 4 * k : 8 + 4 * k], "big") for k in range(ndim))
    offset = 4 + 4 * ndim
    if len(buf) - offset != int(np.prod(dims)):
        raise DataFormatError(
            f"{path}: header says shape {dims} but holds {max(len(buf) - offset, 0)} bytes of data "
            f"(truncated?); {fix}"
        )
    return np.frombuffer(buf, dtype=np.uint8, offset=offset).reshape(dims)
