"""LeNet for MNIST, as in MACER model.py / smoothing-consistency archs/lenet.py.

conv5x5(C->20), ReLU, maxpool2, conv5x5(20->50), ReLU, maxpool2, FC(800->500), ReLU, FC(500->classes).
Submodule names (conv1, conv2, fc1, fc2) match those repositories, so their state dicts load as is.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch.nn.functional as F
from torch import Tensor, nn

from rs_lightning.models._shape import chw


class LeNet(nn.Module):
    """LeNet; the flatten size 50 * H' * W' with H' = ((H - 4) // 2 - 4) // 2 is 800 for 28x28.

    Args:
        input_shape: (C, H, W) of the [0,1] input.
        num_classes: number of logits.
    """

    def __init__(self, *, input_shape: Sequence[int], num_classes: int) -> None:
        super().__init__()
        c, h, w = chw(input_shape)
        fh, fw = ((h - 4) // 2 - 4) // 2, ((w - 4) // 2 - 4) // 2
        if fh < 1 or fw < 1:
            raise ValueError(f"LeNet needs H, W >= 16, got input_shape={(c, h, w)}")
        self.conv1 = nn.Conv2d(c, 20, 5)
        self.conv2 = nn.Conv2d(20, 50, 5)
        self.fc1 = nn.Linear(50 * fh * fw, 500)
        self.fc2 = nn.Linear(500, int(num_classes))

    def forward(self, x: Tensor) -> Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))
