"""Small, fast networks for the embedded 8x8 digits set (sklearn ``load_digits``) and other tiny inputs."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from rs_lightning.models._shape import chw, ints


class DigitsCNN(nn.Module):
    """conv3x3(C->c1), ReLU, conv3x3(c1->c2), ReLU, maxpool2, FC(->hidden), ReLU, FC(->classes).

    Convolutions are padded, so the flatten size is c2 * (H//2) * (W//2) (1024 for 1x8x8).

    Args:
        input_shape: (C, H, W) of the [0,1] input.
        num_classes: number of logits.
        channels: (c1, c2) conv widths.
        hidden: width of the hidden FC layer.
    """

    def __init__(
        self,
        *,
        input_shape: Sequence[int],
        num_classes: int,
        channels: Sequence[int] = (32, 64),
        hidden: int = 128,
    ) -> None:
        super().__init__()
        c, h, w = chw(input_shape)
        c1, c2 = ints(channels, "channels")
        if h < 2 or w < 2:
            raise ValueError(f"DigitsCNN needs H, W >= 2, got input_shape={(c, h, w)}")
        self.features = nn.Sequential(
            nn.Conv2d(c, c1, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(c1, c2, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(c2 * (h // 2) * (w // 2), int(hidden)),
            nn.ReLU(inplace=True),
            nn.Linear(int(hidden), int(num_classes)),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x))


class MLP(nn.Module):
    """Flatten, then [Linear, ReLU] per hidden width, then Linear(->classes).

    Args:
        input_shape: (C, H, W) of the [0,1] input.
        num_classes: number of logits.
        hidden: hidden layer widths.
    """

    def __init__(
        self, *, input_shape: Sequence[int], num_classes: int, hidden: Sequence[int] = (256, 256)
    ) -> None:
        super().__init__()
        c, h, w = chw(input_shape)
        layers: list[nn.Module] = [nn.Flatten()]
        width = c * h * w
        for size in ints(hidden, "hidden") if hidden else ():
            layers += [nn.Linear(width, size), nn.ReLU(inplace=True)]
            width = size
        layers.append(nn.Linear(width, int(num_classes)))
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)
