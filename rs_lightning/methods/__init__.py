"""Training methods: one LightningModule per method on :class:`SmoothingMethod`."""

from .base import CHECKPOINT_KEY, SmoothingMethod
from .gaussian import GaussianAugmentation

__all__ = ["CHECKPOINT_KEY", "GaussianAugmentation", "SmoothingMethod"]
