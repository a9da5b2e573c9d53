"""The smoothing noises, one class per distribution on the contract in :mod:`.base` (Gaussian, Laplace,
uniform). Importing the package imports each of its modules, so a noise defined in a new file here is
registered without a list to extend."""

import importlib
import pkgutil

from .base import NOISE_CLASSES, Noise, noise_of

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

from .gaussian import Gaussian, gaussian_quantile  # noqa: E402
from .laplace import Laplace  # noqa: E402
from .uniform import Uniform  # noqa: E402

__all__ = ["NOISE_CLASSES", "Gaussian", "Laplace", "Noise", "Uniform", "gaussian_quantile", "noise_of"]
