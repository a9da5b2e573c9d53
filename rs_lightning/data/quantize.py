"""Inputs on the 8-bit pixel grid x = k/255, which lattice noise certifies (Voráček & Hein, ICLR 2023).

Every uint8 image dataset is on it already. A dataset that is not (sklearn's digits, v/16; a float ``.npz``)
is refused by lattice noise rather than rounded silently; ``quantize=true`` rounds it explicitly
(:class:`QuantizedDataset`), and the run records that it did.
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset

from rs_lightning.smoothing.noises.gaussian_lattice import LEVELS, OFF_GRID_TOLERANCE


class QuantizedDataset(Dataset):
    """``dataset`` with each input rounded to the nearest level k/255 (clipped to [0, 1])."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, i: int):
        x, y = self.dataset[i]
        x = torch.as_tensor(x, dtype=torch.float32)
        return x.clamp(0, 1).mul(LEVELS).round_().div_(LEVELS), y


def first_off_grid(dataset: Dataset, indices) -> tuple[int, float] | None:
    """``(idx, distance in levels)`` of the first input of ``indices`` with a pixel off the grid, or None."""
    for i in indices:
        scaled = torch.as_tensor(dataset[i][0], dtype=torch.float64) * LEVELS
        off = float((scaled - scaled.round()).abs().max()) if scaled.numel() else 0.0
        if off > OFF_GRID_TOLERANCE:
            return int(i), off
    return None
