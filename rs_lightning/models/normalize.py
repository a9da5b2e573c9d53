"""Normalization as the model's first layer (locuslab/smoothing
``code/datasets.py`` ``NormalizeLayer``).

Inputs are images in [0,1] pixel space; Gaussian noise is added to them *before* this layer and never
clipped, so sigma and certified radii are in [0,1]-pixel units (Cohen et al. 2019, ``NormalizeLayer``).
Unlike Cohen's layer, ``mean``/``std`` are persistent buffers, so a checkpoint carries the normalization.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def _as_vector(values: Sequence[float], name: str) -> torch.Tensor:
    vec = torch.tensor([float(v) for v in values], dtype=torch.float32)
    if vec.ndim != 1 or vec.numel() == 0:
        raise ValueError(f"{name} must be a non-empty sequence of floats, got {values!r}")
    if not bool(torch.isfinite(vec).all()):
        raise ValueError(f"{name} must be finite, got {values!r}")
    return vec


class Normalize(nn.Module):
    """``(x - mean) / std`` per channel; identity when ``mean`` and ``std`` are both None.

    Args:
        mean: per-channel mean, or None for identity.
        std: per-channel standard deviation (> 0), or None for identity.
    """

    mean: torch.Tensor | None
    std: torch.Tensor | None

    def __init__(self, mean: Sequence[float] | None = None, std: Sequence[float] | None = None) -> None:
        super().__init__()
        if (mean is None) != (std is None):
            raise ValueError(f"give both mean and std, or neither (identity); got mean={mean!r}, std={std!r}")
        if mean is None or std is None:
            # None buffers are not part of the state_dict: identity has no state.
            self.register_buffer("mean", None)
            self.register_buffer("std", None)
            return
        m, s = _as_vector(mean, "mean"), _as_vector(std, "std")
        if m.numel() != s.numel():
            raise ValueError(f"mean and std need one value per channel, got {m.numel()} and {s.numel()}")
        if not bool((s > 0).all()):
            raise ValueError(f"std must be > 0, got {std!r}")
        self.register_buffer("mean", m.view(1, -1, 1, 1))
        self.register_buffer("std", s.view(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mean is None or self.std is None:
            return x
        return (x - self.mean) / self.std

    def extra_repr(self) -> str:
        if self.mean is None or self.std is None:
            return "identity"
        return f"mean={self.mean.flatten().tolist()}, std={self.std.flatten().tolist()}"


def build_classifier(
    net: nn.Module, mean: Sequence[float] | None, std: Sequence[float] | None
) -> nn.Sequential:
    """Base classifier f(x) = net((x - mean) / std) on [0,1] inputs, as ``Sequential(Normalize, net)``.

    Same layout as Cohen et al.'s checkpoints (net weights under the ``1.`` prefix).
    """
    return nn.Sequential(Normalize(mean, std), net)
