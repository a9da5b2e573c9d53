"""Training methods: one LightningModule per method on :class:`SmoothingMethod` (select with ``method=``)."""

from .acr_gaming import ACRGaming
from .ars import AdaptiveRS
from .base import CHECKPOINT_KEY, SmoothingMethod
from .catrs import CATRS
from .consistency import Consistency
from .faults import NonFiniteLossError, NonFiniteWeightsError
from .gaussian import GaussianAugmentation
from .macer import MACER
from .smoothadv import SmoothAdv
from .smoothmix import SmoothMix

__all__ = [
    "ACRGaming",
    "AdaptiveRS",
    "CATRS",
    "CHECKPOINT_KEY",
    "MACER",
    "NonFiniteLossError",
    "NonFiniteWeightsError",
    "Consistency",
    "GaussianAugmentation",
    "SmoothAdv",
    "SmoothMix",
    "SmoothingMethod",
]
