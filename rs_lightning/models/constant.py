"""The trivial constant classifier of Sun et al. 2025, *Average Certified Radius is a Poor Metric for
Randomized Smoothing*, Theorem 1."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from rs_lightning.models._shape import chw


class ConstantClassifier(nn.Module):
    """h(x) = ``label`` for every input: logits with 1 at ``label`` and 0 elsewhere; no parameters.

    Under any noise p_A = 1, so CERTIFY with N draws returns the radius cap σ·Φ⁻¹(α^(1/N)) on every input
    of class ``label`` and is wrong on all others: ACR(h) = π_label·σ·Φ⁻¹(α^(1/N)) (Theorem 1), which grows
    without bound in N. Certify it without a checkpoint:
    ``python certify.py checkpoint=null model=constant data=digits sigma=0.25``.

    Args:
        input_shape: (C, H, W) of the [0,1] input (checked, otherwise unused).
        num_classes: number of logits.
        label: the class always predicted, in ``[0, num_classes)``.
    """

    def __init__(self, *, input_shape: Sequence[int], num_classes: int, label: int = 0) -> None:
        super().__init__()
        self.input_shape = chw(input_shape)
        self.num_classes, self.label = int(num_classes), int(label)
        if self.num_classes < 1 or not 0 <= self.label < self.num_classes:
            raise ValueError(f"label must be in [0, {num_classes}), got label={label}")

    def forward(self, x: Tensor) -> Tensor:
        logits = torch.zeros((x.shape[0], self.num_classes), device=x.device, dtype=x.dtype)
        logits[:, self.label] = 1.0
        return logits

    def extra_repr(self) -> str:
        return f"label={self.label}, num_classes={self.num_classes}"
