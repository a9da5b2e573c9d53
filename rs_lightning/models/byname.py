"""Architectures built by name from a model library: ``model=timm model.name=resnet18`` (timm,
huggingface/pytorch-image-models ``timm.create_model``) and ``model=torchvision model.name=resnet18``
(``torchvision.models.get_model``). Both are randomly initialized: nothing is downloaded; pretrained weights
come from a local file (``model.weights=PATH``, :mod:`rs_lightning.models.weights`). The library's network is
the attribute ``net``, so a state dict saved from the library's own model loads into it unchanged."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from rs_lightning.validation import ConfigError

from ._shape import chw


class _LibraryModel(nn.Module):
    """A library's network as the attribute ``net``, where a state dict of the library's model loads."""

    net: nn.Module

    def weights_module(self) -> nn.Module:
        """Where a state dict of the library's model loads (``model.weights``)."""
        return self.net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TimmModel(_LibraryModel):
    """``timm.create_model(name, pretrained=False, num_classes=…, in_chans=C, **options)``.

    Args:
        name: a timm model name (``timm.list_models()``), e.g. ``resnet18``, ``vit_tiny_patch16_224``.
        input_shape: (C, H, W); timm adapts the stem to C channels.
        num_classes: number of logits.
        options: further keyword arguments of that model (plain values, e.g. ``{drop_rate: 0.1}``).
    """

    def __init__(
        self,
        *,
        name: str,
        input_shape: Sequence[int],
        num_classes: int,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        try:
            import timm
        except ImportError as err:
            raise ConfigError(
                "model.name", name, "a timm model with timm installed", "pip install 'rs-lightning[models]'"
            ) from err
        if not timm.is_model(str(name)):
            raise ConfigError("model.name", name, "a timm model name", "see timm.list_models()")
        c, _, _ = chw(input_shape)
        self.net = timm.create_model(
            str(name), pretrained=False, num_classes=int(num_classes), in_chans=c, **dict(options or {})
        )


class TorchvisionModel(_LibraryModel):
    """``torchvision.models.get_model(name, weights=None, num_classes=…, **options)``. Torchvision's
    classifiers take 3 channels: a 1-channel input (MNIST) is repeated to 3, other channel counts are
    refused.

    Args:
        name: a torchvision classification model (``torchvision.models.list_models(torchvision.models)``).
        input_shape: (C, H, W) with C = 3 or 1.
        num_classes: number of logits.
        options: further keyword arguments of that model's builder (plain values).
    """

    def __init__(
        self,
        *,
        name: str,
        input_shape: Sequence[int],
        num_classes: int,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        import torchvision.models as models

        classifiers = models.list_models(module=models)
        if str(name) not in classifiers:
            raise ConfigError(
                "model.name",
                name,
                "a torchvision classification model",
                f"one of {', '.join(classifiers[:8])}, … (see torchvision.models.list_models())",
            )
        c, _, _ = chw(input_shape)
        if c not in (1, 3):
            raise ConfigError("data", f"{c} channels", "3 or 1 channels for a torchvision model")
        self.repeat = 3 if c == 1 else 1
        self.net = models.get_model(
            str(name), weights=None, num_classes=int(num_classes), **dict(options or {})
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.expand(-1, 3, -1, -1) if self.repeat == 3 else x)
