"""A user's architecture: a plain module taking the data's input_shape and num_classes."""

import torch
from torch import nn


class TinyNet(nn.Module):
    """Two 3x3 convolutions, global average pooling and a linear head."""

    def __init__(self, *, input_shape, num_classes, width: int = 16):
        super().__init__()
        c = int(input_shape[0])
        self.features = nn.Sequential(
            nn.Conv2d(c, width, 3, padding=1), nn.ReLU(), nn.Conv2d(width, width, 3, padding=1), nn.ReLU()
        )
        self.head = nn.Linear(width, int(num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))
