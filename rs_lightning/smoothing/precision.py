"""The base classifier f as it is certified: a network evaluated at a precision, a memory layout, compiled.

Randomized smoothing certifies g(x) = argmax_c P[f(x + ε) = c] for whatever *function* f is evaluated on the
noisy samples. With ``precision=bf16`` (or ``16`` on CUDA) f is the network run under ``torch.autocast`` in
that dtype, so the certificate is exact for that f — it is not a statement about the fp32 network. Noise is
always drawn and added in float32 (the noise streams do not depend on the precision); counts stay exact
integers. ``channels_last`` and ``compile`` change only the order of floating-point operations.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

import torch
from torch import nn

from rs_lightning.validation import ConfigError

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "16": torch.float16}


class NonFiniteLogitsError(ValueError):
    """The base classifier returned NaN or ±inf logits: its argmax would silently be class 0."""


def check_precision_supported(precision: str, device: torch.device | str, key: str = "precision") -> None:
    """Raise :class:`ConfigError` for a precision the device cannot run (``16`` off CUDA, ``bf16`` on a GPU
    without bf16 units)."""
    device = torch.device(device)
    if precision == "16" and device.type != "cuda":
        raise ConfigError(key, precision, "32 or bf16 on a CPU", "float16 certification needs a CUDA device")
    if precision == "bf16" and device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        if not torch.cuda.is_bf16_supported(including_emulation=False) or (
            torch.cuda.get_device_capability(index)[0] < 8
        ):
            raise ConfigError(
                key, precision, "32 or 16 on this GPU", "it has no bfloat16 units (needs sm_80+)"
            )
    if precision != "32" and device.type not in ("cpu", "cuda"):
        raise ConfigError(key, precision, f"32 on {device.type}")


class BaseClassifier:
    """Callable ``f(x) -> logits`` (float32) around ``model``: autocast at ``precision``, inputs in
    ``channels_last`` if asked (the model is then a converted copy; the caller's module is left as it is;
    :meth:`refresh` re-syncs the copy), and optionally ``torch.compile``; a failure of the first (compiling)
    call falls back to eager mode with a warning.
    """

    def __init__(
        self, model: nn.Module, *, precision: str = "32", channels_last: bool = False, compile: bool = False
    ) -> None:
        self.module = model
        self.precision = str(precision)
        self.channels_last = bool(channels_last)
        self.autocast_dtype = AUTOCAST_DTYPES.get(self.precision)
        self.compile = bool(compile)
        network = model
        if self.channels_last:
            network = copy.deepcopy(model).to(memory_format=torch.channels_last)
        self._eager: Callable = network
        self._forward: Callable = network
        self._compiled = self.compile
        self._compile_checked = False
        if compile:
            try:
                self._forward = torch.compile(network)
            except Exception as err:  # noqa: BLE001 (any backend failure: fall back)
                self._fallback(err)

    def refresh(self) -> BaseClassifier:
        """Make the channels_last copy follow the wrapped module's current weights and device (for callers
        that keep one classifier while the module changes, as ``Smooth`` does); no-op without a copy."""
        if self._eager is not self.module:
            source = next(iter(self.module.state_dict().values()), None)
            if source is not None:
                self._eager.to(source.device)
            self._eager.load_state_dict(self.module.state_dict())
        return self

    def _fallback(self, err: Exception) -> None:
        warnings.warn(
            f"torch.compile failed ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); "
            "certifying the network in eager mode (same function, slower)",
            RuntimeWarning,
            stacklevel=3,
        )
        self._forward, self._compiled = self._eager, False

    def eval(self) -> BaseClassifier:
        self.module.eval()
        if self._eager is not self.module:
            self._eager.eval()
        return self

    def __call__(self, x: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        """``f(x)``, or ``F(x, noise)`` for a :class:`~rs_lightning.smoothing.pipeline.NoisePipeline`."""
        if self.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        if not self._compiled or self._compile_checked:
            return self._run(self._forward, x, *rest)
        try:  # the first call compiles: a failure there falls back to eager mode
            out = self._run(self._forward, x, *rest)
        except Exception as err:  # noqa: BLE001 (any backend failure: fall back)
            self._fallback(err)
            return self._run(self._forward, x, *rest)
        self._compile_checked = True
        return out

    def _run(self, forward: Callable, x: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        if self.autocast_dtype is None:
            return forward(x, *rest)
        with torch.autocast(device_type=x.device.type, dtype=self.autocast_dtype):
            return forward(x, *rest).float()


def as_base_classifier(model, *, precision="32", channels_last=False, compile=False) -> BaseClassifier:
    """``model`` itself if it is already a :class:`BaseClassifier`, else one wrapping it."""
    if isinstance(model, BaseClassifier):
        return model
    return BaseClassifier(model, precision=precision, channels_last=channels_last, compile=compile)
